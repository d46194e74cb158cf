"""Operational services over timer rows: requeue dead letters.

The ``requeue_saga_timeouts`` command and the admin's ``requeue_dead_lettered`` action are
thin wrappers over these functions. Purging retired rows is retention's job
(``bsft_saga.retention.purge_timeouts``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db import IntegrityError, transaction

from bsft_saga.models import SagaTimeout

__all__ = ["RequeueResult", "requeue_dead_lettered"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RequeueResult:
    """What ``requeue_dead_lettered`` did.

    ``refused`` lists ``(timeout id, reason)`` for every id that was not requeued, in the
    order the ids were given.
    """

    requeued: int = 0
    refused: list[tuple[int, str]] = field(default_factory=list)


def requeue_dead_lettered(ids: Iterable[int] | None = None) -> RequeueResult:
    """Return dead-lettered timers to the pending set; ``None`` means every dead letter.

    A requeued row is due again at its original ``due_at`` with ``attempts`` reset to 0 and
    its ``message_id`` and ``last_error`` kept: receivers see the same message again, and
    the error stays visible until the row fires. The catch-up policy applies to it like to
    any overdue row (``skip_beyond_max_age`` discards it as missed once it is older than
    ``MAX_CATCH_UP_AGE``).

    A row is refused, with a reason naming the saga and the timer, when it does not exist,
    is not dead-lettered, belongs to a completed saga (its event could only fire into the
    void), or when the saga already has a pending timer of the same name (a pending name is
    unique per saga; cancel that timer or let it fire first). Each row is requeued in its
    own savepoint, conditionally on still being dead-lettered, so concurrent requeues and
    schedules are safe and one refusal never undoes another row's requeue.
    """
    if ids is None:
        wanted = list(
            SagaTimeout.objects.dead_lettered()
            .order_by("dead_lettered_at", "id")
            .values_list("id", flat=True)
        )
    else:
        wanted = list(dict.fromkeys(int(pk) for pk in ids))
    rows = SagaTimeout.objects.filter(pk__in=wanted).select_related("saga").in_bulk()
    requeued = 0
    refused: list[tuple[int, str]] = []
    for pk in wanted:
        row = rows.get(pk)
        reason = _refusal(pk, row) if row is not None else f"timeout {pk} does not exist"
        if reason is None and row is not None:
            reason = _requeue_one(row)
        if reason is None:
            requeued += 1
        else:
            refused.append((pk, reason))
    return RequeueResult(requeued=requeued, refused=refused)


def _describe(row: SagaTimeout) -> str:
    saga = row.saga
    return f"timer {row.name!r} (id {row.pk}) of saga {saga.saga_type}[{saga.correlation_key}]"


def _refusal(pk: int, row: SagaTimeout) -> str | None:
    if row.dead_lettered_at is None:
        state = "pending" if row.dispatched_at is None else f"outcome {row.outcome!r}"
        return f"{_describe(row)} is not dead-lettered ({state})"
    if row.saga.is_complete:
        return f"{_describe(row)} belongs to a completed saga; its event would fire into the void"
    return _pending_twin(row)


def _pending_twin(row: SagaTimeout) -> str | None:
    twin = (
        SagaTimeout.objects.pending()
        .filter(saga_id=row.saga_id, name=row.name)
        .values_list("id", flat=True)
        .first()
    )
    if twin is None:
        return None
    return (
        f"{_describe(row)}: the saga already has a pending timer {row.name!r} (id {twin}); "
        "cancel it or let it fire first"
    )


def _requeue_one(row: SagaTimeout) -> str | None:
    try:
        with transaction.atomic():
            changed = (
                SagaTimeout.objects.dead_lettered()
                .filter(pk=row.pk)
                .update(
                    dispatched_at=None,
                    outcome=None,
                    dead_lettered_at=None,
                    dead_letter_reason="",
                    attempts=0,
                    claim_token=None,
                    claimed_until=None,
                )
            )
    except IntegrityError:
        # A pending timer of that name was written after the check above.
        logger.info("bsft_saga: requeue of timeout %s lost a race with a schedule", row.pk)
        return _pending_twin(row) or f"{_describe(row)} conflicts with a pending timer"
    if not changed:
        return f"{_describe(row)} is no longer dead-lettered"
    return None
