"""``drain_due()``: one dispatch pass over due timers.

A pass reads due pending rows (oldest first, at most ``BATCH_SIZE``), claims them, applies
the catch-up policy, and publishes each claimed row's event under the correlation id it
was scheduled with. Claims are fenced by a token: on backends with ``SKIP LOCKED`` the
rows are selected ``FOR UPDATE SKIP LOCKED`` so that concurrent dispatchers take disjoint
rows; elsewhere each row is claimed by a conditional update. A claim is a lease: rows of
a dispatcher that died are taken over once it expires, and the stale holder's writes no
longer match the token.

When a step of the timer's own saga handles its event, that step's window stamps the
timer in the same commit (exactly once for the saga). Every other receiver gets the
event at least once.
"""

from __future__ import annotations

import asyncio
import logging
import operator
import uuid
from dataclasses import astuple, dataclass
from datetime import datetime

from django.db import connection, transaction
from django.db.models import Case, DateTimeField, F, Q, Value, When
from django.db.models.functions import Coalesce

from bsft_saga import clock, telemetry
from bsft_saga.conf import TimeoutSettings, saga_settings
from bsft_saga.events import codec
from bsft_saga.events.envelope import Envelope, TimerOrigin
from bsft_saga.events.registry import event_class, event_type_of
from bsft_saga.events.sending import send_envelope
from bsft_saga.exceptions import failure_reason
from bsft_saga.models import SagaTimeout, TimeoutOutcome
from bsft_saga.querysets import SagaTimeoutQuerySet
from bsft_saga.timeouts.catch_up import select_missed

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DrainReport:
    """What one pass did. ``unclaimed``: due rows another dispatcher or a cancellation took."""

    fired: int = 0
    missed: int = 0
    failed: int = 0
    dead_lettered: int = 0
    unclaimed: int = 0

    def __add__(self, other: DrainReport) -> DrainReport:
        return DrainReport(*map(operator.add, astuple(self), astuple(other)))

    @property
    def settled(self) -> int:
        """Timers that stopped being due in this pass."""
        return self.fired + self.missed + self.dead_lettered + self.unclaimed

    def __str__(self) -> str:
        return (
            f"fired={self.fired} missed={self.missed} failed={self.failed} "
            f"dead_lettered={self.dead_lettered} unclaimed={self.unclaimed}"
        )


def drain_due(*, batch_size: int | None = None, now: datetime | None = None) -> DrainReport:
    """Run one dispatch pass and report what it did.

    Safe to run from many processes at once. A failing row is counted, logged and left
    pending (or dead-lettered at ``MAX_DISPATCH_ATTEMPTS``); it never stops the pass.
    Only ``KeyboardInterrupt``/``SystemExit`` (a shutdown) escape.

    A pass also re-publishes *unconfirmed* timers: rows their own saga stamped fired in
    its step's commit, but whose dispatcher died (or met a failing receiver) before every
    other receiver had the event. The saga's inbox drops the repeat.
    """
    config = saga_settings.timeouts
    moment = now or clock.now()
    limit = batch_size or config.batch_size
    token = uuid.uuid4()
    # Unconfirmed rows are rare; taking them first, up to a quarter of the batch, keeps a
    # steady backlog of due timers from postponing their re-publication indefinitely.
    seen, claimed = _claim(
        SagaTimeout.objects.unconfirmed(moment), max(1, limit // 4), token, moment, config
    )
    more_seen, more = _claim(
        SagaTimeout.objects.due(moment), limit - len(claimed), token, moment, config
    )
    seen, claimed = seen + more_seen, claimed + more
    report = DrainReport(unclaimed=seen - len(claimed))
    missed_ids = select_missed([row for row in claimed if row.is_pending], config, moment)
    for row in claimed:
        if row.pk in missed_ids:
            report += _stamp_missed(row, token)
        else:
            report += _fire(row, token, config)
    return report


def _claim(
    candidates: SagaTimeoutQuerySet,
    limit: int,
    token: uuid.UUID,
    now: datetime,
    config: TimeoutSettings,
) -> tuple[int, list[SagaTimeout]]:
    """Claim up to ``limit`` of ``candidates``; return how many were seen and the claimed rows."""
    lease_until = now + config.claim_lease
    if connection.features.has_select_for_update_skip_locked:
        # Rows another dispatcher is claiming right now are skipped, not waited for, so
        # concurrent passes take disjoint batches.
        with transaction.atomic():
            mine = list(
                candidates.select_for_update(skip_locked=True, of=("self",)).values_list(
                    "id", flat=True
                )[:limit]
            )
            SagaTimeout.objects.filter(pk__in=mine).update(
                claim_token=token, claimed_until=lease_until
            )
        seen = len(mine)
    else:
        # The conditional update is the fence: it matches only while the row is still a
        # candidate, i.e. while nobody else holds a live claim on it.
        ids = list(candidates.values_list("id", flat=True)[:limit])
        seen = len(ids)
        mine = [
            pk
            for pk in ids
            if candidates.filter(pk=pk).update(claim_token=token, claimed_until=lease_until)
        ]
    rows = list(
        SagaTimeout.objects.filter(pk__in=mine, claim_token=token)
        .select_related("saga")
        .order_by("due_at", "id")
    )
    return seen, rows


def _held(row: SagaTimeout, token: uuid.UUID) -> SagaTimeoutQuerySet:
    """The row while this pass's claim still holds it: pending, or fired but unconfirmed."""
    return SagaTimeout.objects.filter(pk=row.pk, claim_token=token).filter(
        Q(dispatched_at__isnull=True) | Q(outcome=TimeoutOutcome.FIRED)
    )


def _stamp_missed(row: SagaTimeout, token: uuid.UUID) -> DrainReport:
    missed = _held(row, token).filter(dispatched_at__isnull=True)
    if not missed.update(
        dispatched_at=clock.now(), outcome=TimeoutOutcome.MISSED, claimed_until=None
    ):
        return DrainReport(unclaimed=1)
    telemetry.count("timeout.missed", row.saga.saga_type)
    return DrainReport(missed=1)


def _fire(row: SagaTimeout, token: uuid.UUID, config: TimeoutSettings) -> DrainReport:
    saga_type = row.saga.saga_type
    if not _held(row, token).exists():
        # Cancelled or replaced since this pass claimed it: never published.
        return DrainReport(unclaimed=1)
    try:
        with telemetry.timeout_span(saga_type, row.name):
            send_envelope(_envelope(row, token))
    except (Exception, asyncio.CancelledError) as exc:
        # A cancellation raised by a woken step is that timer's failure, not a shutdown.
        logger.exception(
            "bsft_saga: timer %r (id %s) of %s failed to fire", row.name, row.pk, saga_type
        )
        return _record_failure(row, token, exc, config)
    # Every receiver has had the event: stamp it fired, or confirm the stamp its own
    # saga's step wrote, by ending the lease.
    held = _held(row, token)
    if not held.update(
        dispatched_at=Coalesce("dispatched_at", Value(clock.now())),
        outcome=TimeoutOutcome.FIRED,
        claimed_until=None,
    ):
        return DrainReport(unclaimed=1)
    telemetry.count("timeout.fired", saga_type)
    return DrainReport(fired=1)


def _envelope(row: SagaTimeout, token: uuid.UUID) -> Envelope:
    cls = event_class(row.event_type)
    try:
        event = codec.decode(cls, row.payload)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"the stored {row.event_type!r} payload no longer decodes: {exc}") from exc
    return Envelope(
        message_id=row.message_id,
        event=event,
        event_type=event_type_of(cls),  # the primary name, also for a row stored under an alias
        correlation_id=row.correlation_id or None,
        causation_id=None,
        deadline=row.saga.deadline,
        published_at=clock.now(),
        timer=TimerOrigin(timeout_id=row.pk, saga_id=row.saga_id, name=row.name, claim_token=token),
    )


def _record_failure(
    row: SagaTimeout, token: uuid.UUID, exc: BaseException, config: TimeoutSettings
) -> DrainReport:
    """Count a failed attempt and release the row for a later pass; dead-letter at the limit.

    A pending row goes back to the due set. A row its own saga already stamped fired stays
    fired and becomes unconfirmed at once, so the next pass re-publishes it to the other
    receivers (at least once) while the saga's inbox drops the repeat (exactly once).
    """
    reason = failure_reason(exc)
    attempts = row.attempts + 1
    now = clock.now()
    held = _held(row, token)
    if attempts >= config.max_dispatch_attempts:
        retired = held.update(
            attempts=attempts,
            last_error=reason,
            dispatched_at=Coalesce("dispatched_at", Value(now)),
            outcome=TimeoutOutcome.DEAD_LETTERED,
            dead_lettered_at=now,
            dead_letter_reason=reason,
            claimed_until=None,
        )
        if not retired:
            return DrainReport(unclaimed=1)
        telemetry.count("timeout.dead_lettered", row.saga.saga_type)
        return DrainReport(dead_lettered=1)
    released = held.update(
        attempts=F("attempts") + 1,
        last_error=reason,
        claim_token=None,
        # Pending: no claim. Fired by its saga: a lease that has already run out.
        claimed_until=Case(
            When(dispatched_at__isnull=True, then=Value(None)),
            default=Value(now),
            output_field=DateTimeField(),
        ),
    )
    return DrainReport(failed=1) if released else DrainReport(unclaimed=1)
