"""The purge's part for heartbeats: ``SagaDispatcher`` rows of processes long gone.

A dispatcher that stops cleanly removes its own row; one that was killed (or whose host
went away) leaves it, stale, so that ``saga_status`` and the admin show that it died. Once
its last pass is older than :func:`kept_for` nothing refers to it any more (its claims'
leases ran out long ago) and the purge deletes it. A row whose last pass lies more than
``STALE_AFTER`` after now (a host whose clock runs far ahead, a row written by hand, a
moment out of range) proves no dispatcher alive: the purge deletes it too. A process that
was only cut off that long, or whose clock runs that far ahead, and passes again writes its
row anew (its ``delivered`` then counts from there).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import Q, QuerySet

from bsft_saga import clock
from bsft_saga.conf import saga_settings
from bsft_saga.models import SagaDispatcher
from bsft_saga.retention.batches import DEFAULT_BATCH_SIZE, delete_in_batches

__all__ = ["KEPT_FOR", "dead_dispatchers", "kept_for", "prune_dispatchers"]

#: How long the heartbeat of a process that stopped reporting is kept, at least.
KEPT_FOR = timedelta(days=1)


def kept_for() -> timedelta:
    """:data:`KEPT_FOR`, or ``STALE_AFTER`` or ``CLAIM_LEASE`` if either is longer: a row is
    pruned only once it is stale and no lease it took can still hold a row."""
    delivery = saga_settings.delivery
    return max(KEPT_FOR, delivery.stale_after, delivery.claim_lease)


def dead_dispatchers(now: datetime | None = None) -> QuerySet[SagaDispatcher]:
    """Dispatchers whose last pass (or, never having passed, whose start) is older than
    :func:`kept_for` at ``now``, or lies more than ``STALE_AFTER`` after ``now``.

    A moment that cannot be read back (out of range, written by hand) is one or the other,
    also on SQLite, where it compares as text."""
    moment = now or clock.now()
    cutoff, horizon = moment - kept_for(), moment + saga_settings.delivery.stale_after
    return SagaDispatcher.objects.filter(
        Q(last_pass_at__lt=cutoff)
        | Q(last_pass_at__gt=horizon)
        | Q(last_pass_at__isnull=True, started_at__lt=cutoff)
        | Q(last_pass_at__isnull=True, started_at__gt=horizon)
    )


def prune_dispatchers(
    *, now: datetime | None = None, dry_run: bool = False, batch_size: int = DEFAULT_BATCH_SIZE
) -> int:
    """Delete :func:`dead_dispatchers` (``dry_run``: count them); return how many."""
    rows = dead_dispatchers(now)
    return rows.count() if dry_run else delete_in_batches(rows, batch_size)
