"""Query vocabulary for saga rows. Nothing here writes."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from django.db import models
from django.db.models import Exists, OuterRef, Q

if TYPE_CHECKING:
    # Named in the string type arguments of the QuerySet bases below.
    from bsft_saga.models import SagaInstance, SagaOutboxMessage, SagaTimeout  # noqa: F401


def _claim_free(now: datetime) -> Q:
    return Q(claimed_until__isnull=True) | Q(claimed_until__lt=now)


class SagaInstanceQuerySet(models.QuerySet["SagaInstance"]):
    def active(self) -> SagaInstanceQuerySet:
        return self.filter(is_complete=False)

    def for_key(self, saga_type: str, correlation_key: str) -> SagaInstanceQuerySet:
        return self.filter(saga_type=saga_type, correlation_key=correlation_key)

    def stalled(self, since: datetime) -> SagaInstanceQuerySet:
        """Active instances that have not moved since ``since``."""
        return self.active().filter(updated_at__lt=since)

    def stuck(self, since: datetime) -> SagaInstanceQuerySet:
        """Stalled since ``since`` and without a pending timer: no timer (a deadline
        included) will ever move them; only an outside event can."""
        from bsft_saga.models import SagaTimeout

        pending = SagaTimeout.objects.pending().filter(saga=OuterRef("pk"))
        return self.stalled(since).exclude(Exists(pending))


class SagaTimeoutQuerySet(models.QuerySet["SagaTimeout"]):
    def pending(self) -> SagaTimeoutQuerySet:
        return self.filter(dispatched_at__isnull=True)

    def due(self, now: datetime) -> SagaTimeoutQuerySet:
        """Pending rows due at ``now`` that no live claim holds, oldest first."""
        return (
            self.pending().filter(due_at__lte=now).filter(_claim_free(now)).order_by("due_at", "id")
        )

    def unconfirmed(self, now: datetime) -> SagaTimeoutQuerySet:
        """Fired rows whose dispatcher never confirmed that every receiver had the event.

        The woken step of the timer's own saga stamps it fired in its commit; the
        dispatcher confirms by ending the claim's lease once all receivers ran. A lease
        that ran out unconfirmed means the event must be published again.
        """
        return self.filter(outcome="fired", claimed_until__lte=now).order_by("claimed_until", "id")

    def dead_lettered(self) -> SagaTimeoutQuerySet:
        return self.filter(dead_lettered_at__isnull=False)

    def retired_before(self, cutoff: datetime) -> SagaTimeoutQuerySet:
        """Rows that left the pending set (any outcome) before ``cutoff``."""
        return self.filter(dispatched_at__lt=cutoff)


class SagaOutboxQuerySet(models.QuerySet["SagaOutboxMessage"]):
    def pending(self) -> SagaOutboxQuerySet:
        return self.filter(delivered_at__isnull=True, dead_lettered_at__isnull=True)

    def deliverable(self, now: datetime) -> SagaOutboxQuerySet:
        return self.pending().filter(_claim_free(now)).order_by("created_at", "id")

    def dead_lettered(self) -> SagaOutboxQuerySet:
        return self.filter(dead_lettered_at__isnull=False)
