"""Which rows a purge may delete, as querysets. Nothing here writes.

The rule of every selection: nothing is deleted that is still live or still owed — an
active instance or its inbox rows, a pending timer (``dispatched_at IS NULL``), a
pending outbox row, or a dead letter the policy keeps, with the instance it belongs to.
"""

from __future__ import annotations

from django.db.models import Exists, OuterRef, Q, QuerySet

from bsft_saga.models import (
    SagaAuditRecord,
    SagaInstance,
    SagaOutboxMessage,
    SagaTimeout,
)
from bsft_saga.querysets import SagaInstanceQuerySet, SagaOutboxQuerySet, SagaTimeoutQuerySet
from bsft_saga.retention.policy import RetentionPolicy

#: Timer rows that still owe something: the pending ones. (A retired timer owes nothing: a
#: fired timer's stamp commits with its every receiver's work, in the dispatcher's batch.)
LIVE_TIMER = Q(dispatched_at__isnull=True)

#: Outbox rows that still owe their event to receivers: neither delivered nor dead-lettered.
PENDING_OUTBOX = Q(delivered_at__isnull=True, dead_lettered_at__isnull=True)


def retired_timers(policy: RetentionPolicy) -> SagaTimeoutQuerySet:
    """Timers of any instance that left the pending set (any outcome) before the cutoff."""
    rows = SagaTimeout.objects.retired_before(policy.cutoff).exclude(LIVE_TIMER)
    if policy.keep_dead_lettered:
        rows = rows.filter(dead_lettered_at__isnull=True)
    return rows


def delivered_outbox(policy: RetentionPolicy) -> SagaOutboxQuerySet:
    """Outbox rows delivered before the cutoff, whatever instance they belong to (or none)."""
    return SagaOutboxMessage.objects.filter(delivered_at__lt=policy.cutoff)


def dead_outbox(policy: RetentionPolicy) -> SagaOutboxQuerySet:
    """Outbox rows dead-lettered before the cutoff; none when the policy keeps dead letters."""
    if policy.keep_dead_lettered:
        return SagaOutboxMessage.objects.none()
    return SagaOutboxMessage.objects.filter(dead_lettered_at__lt=policy.cutoff)


def finished_instances(policy: RetentionPolicy) -> SagaInstanceQuerySet:
    """Completed instances older than the cutoff that nothing live still needs.

    Excluded: an instance with a live timer or a pending outbox row (it is purged
    once they are settled), and, when the policy keeps dead letters, one with a
    dead-lettered timer or outbox row (its dead letters name it).
    """
    of_instance = {"saga_id": OuterRef("pk")}
    rows = (
        SagaInstance.objects.filter(is_complete=True, completed_at__lt=policy.cutoff)
        .exclude(Exists(SagaTimeout.objects.filter(LIVE_TIMER, **of_instance)))
        .exclude(Exists(SagaOutboxMessage.objects.filter(PENDING_OUTBOX, **of_instance)))
    )
    if policy.keep_dead_lettered:
        rows = rows.exclude(
            Exists(SagaTimeout.objects.dead_lettered().filter(**of_instance))
        ).exclude(Exists(SagaOutboxMessage.objects.dead_lettered().filter(**of_instance)))
    return rows


def expired_audit_records(policy: RetentionPolicy) -> QuerySet[SagaAuditRecord]:
    """Records of ``ModelAuditRecorder`` older than the audit cutoff; none without one."""
    if policy.audit_cutoff is None:
        return SagaAuditRecord.objects.none()
    return SagaAuditRecord.objects.filter(recorded_at__lt=policy.audit_cutoff)
