"""Operational services over timer rows: requeue dead letters.

The ``requeue_saga_timeouts`` command and the admin's ``requeue_dead_lettered`` action are
thin wrappers over this function. Purging retired timers is retention's job
(``bsft_saga.retention``, ``purge_saga_data`` and its timers-only subset
``purge_saga_timeouts``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from bsft_saga.delivery import requeue
from bsft_saga.delivery.requeue import RequeueReport
from bsft_saga.progress import Progress
from bsft_saga.timeouts.channel import TIMERS

__all__ = ["RequeueReport", "requeue_dead_lettered"]


def requeue_dead_lettered(
    ids: Iterable[int] | None = None, *, user: Any = None, progress: Progress | None = None
) -> RequeueReport:
    """Return dead-lettered timers to the pending set; ``None`` means every dead letter.

    A requeued timer is due again at its original ``due_at``, with ``attempts`` 0 and no
    ``next_attempt_at``; the catch-up policy applies to it like to any overdue timer. A row
    is refused, with a reason naming the saga and the timer, when it does not exist, is not
    dead-lettered, belongs to a completed saga, was scheduled for a wait that has ended
    (``scope="step"`` and the saga moved on: it would wake a later step), or when the saga
    already has a pending timer of the same name. A saga's deadline timer
    (``bsft_saga.deadline``), requeued past its due time, fires at the next pass and runs
    ``on_expired``: from a ``user`` without ``expedite.DEADLINE_PERMISSION`` it is refused,
    as firing it now is. Each requeue is audited under ``user`` (``None``: code or a command). See
    ``bsft_saga.delivery.requeue``, also for ``progress``.
    """
    wanted = None if ids is None else [int(pk) for pk in ids]
    return requeue.requeue_dead_lettered(TIMERS, wanted, user=user, progress=progress)
