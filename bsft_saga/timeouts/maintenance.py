"""Operational services over timer rows: requeue dead letters, purge retired rows.

The ``requeue_saga_timeouts`` and ``purge_saga_timeouts`` commands and the admin's
``requeue_dead_lettered`` action are thin wrappers over these functions.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from bsft_saga import clock
from bsft_saga.delivery import requeue
from bsft_saga.delivery.requeue import RequeueResult
from bsft_saga.models import SagaTimeout
from bsft_saga.querysets import SagaTimeoutQuerySet
from bsft_saga.timeouts.channel import TIMERS

__all__ = ["RequeueResult", "purge", "purgeable", "requeue_dead_lettered"]


def requeue_dead_lettered(ids: Iterable[int] | None = None) -> RequeueResult:
    """Return dead-lettered timers to the pending set; ``None`` means every dead letter.

    A requeued timer is due again at its original ``due_at``, with ``attempts`` 0 and no
    ``next_attempt_at``; the catch-up policy applies to it like to any overdue timer. A row
    is refused, with a reason naming the saga and the timer, when it does not exist, is not
    dead-lettered, belongs to a completed saga, was scheduled for a wait that has ended
    (``scope="step"`` and the saga moved on: it would wake a later step), or when the saga
    already has a pending timer of the same name. See ``bsft_saga.delivery.requeue``.
    """
    return requeue.requeue_dead_lettered(TIMERS, None if ids is None else [int(pk) for pk in ids])


def purgeable(
    older_than: timedelta, *, keep_dead_lettered: bool = False, now: datetime | None = None
) -> SagaTimeoutQuerySet:
    """Rows ``purge`` would delete: retired (any outcome) more than ``older_than`` ago."""
    if older_than < timedelta(0):
        raise ValueError(f"older_than must not be negative, got {older_than!r}")
    cutoff = (now or clock.now()) - older_than
    rows = SagaTimeout.objects.retired_before(cutoff)
    if keep_dead_lettered:
        rows = rows.filter(dead_lettered_at__isnull=True)
    return rows


def purge(
    older_than: timedelta,
    *,
    keep_dead_lettered: bool = False,
    dry_run: bool = False,
    batch_size: int = 1000,
    now: datetime | None = None,
) -> int:
    """Delete timer rows whose ``dispatched_at`` is older than ``now - older_than``.

    ``dispatched_at`` marks every way a timer left the pending set, so fired, missed,
    cancelled and dead-lettered rows are swept alike; ``keep_dead_lettered`` keeps the
    dead letters (somebody still has to look at them). Pending rows are never touched.
    Deletes in batches of ``batch_size`` ids, each its own statement, so a huge table never
    needs one giant ``DELETE``; a row requeued meanwhile is left alone. ``dry_run`` only
    counts. Returns the number of rows deleted (or that would be).
    """
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size!r}")
    rows = purgeable(older_than, keep_dead_lettered=keep_dead_lettered, now=now)
    if dry_run:
        return rows.count()
    deleted = 0
    while True:
        batch = list(rows.order_by("dispatched_at", "id").values_list("id", flat=True)[:batch_size])
        if not batch:
            return deleted
        # The purge conditions are applied again: a row requeued since the select is pending.
        count, _ = rows.filter(pk__in=batch).delete()
        deleted += count
