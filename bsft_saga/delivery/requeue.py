"""Return dead-lettered rows to delivery: the operator's way back after fixing a cause."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, transaction

from bsft_saga import journal
from bsft_saga.audit import REQUEUED, record_action
from bsft_saga.delivery.channel import Channel, R
from bsft_saga.models import JournalKind, SagaTimeout
from bsft_saga.progress import Progress

logger = logging.getLogger("bsft_saga.delivery")

#: How many rows a requeue handles between two calls of its ``progress``.
PROGRESS_EVERY = 100


@dataclass(frozen=True)
class RequeueReport:
    """What a requeue did; ``refused`` lists ``(id, reason)`` in the order the ids came."""

    requeued: int = 0
    refused: list[tuple[Any, str]] = field(default_factory=list)


def requeue_dead_lettered(
    channel: Channel[R],
    ids: Iterable[Any] | None = None,
    *,
    user: Any = None,
    progress: Progress | None = None,
) -> RequeueReport:
    """Make dead-lettered rows deliverable again; ``ids=None`` means every dead letter.

    A requeued row has ``attempts`` 0 and no ``next_attempt_at``, so the next pass delivers
    it; its message id and ``last_error`` are kept (receivers see the same message again,
    the error stays visible until it is delivered). A row is refused, with a reason naming
    it, when it does not exist, is not dead-lettered, or when the channel refuses it (see
    ``Channel.requeue_refusal``). Each row is requeued in its own savepoint, conditionally on
    still being dead-lettered, so concurrent requeues are safe and one refusal never undoes
    another row's requeue. Each requeued row writes one audit record
    (``"saga.timeout.requeued"`` or ``"saga.outbox.requeued"``, naming ``user`` — ``None``
    from a command — and the row's saga) in the savepoint that requeued it, and, for a row
    of a saga, one ``requeued`` entry in that saga's journal. ``progress`` (see
    :mod:`bsft_saga.progress`) is told every ``PROGRESS_EVERY`` rows, and after the last,
    how many of the ids have been dealt with.
    """
    every_row = channel.all_rows()
    if ids is None:
        wanted: list[Any] = list(
            every_row.dead_lettered()
            .order_by("dead_lettered_at", "pk")
            .values_list("pk", flat=True)
        )
    else:
        wanted = list(dict.fromkeys(ids))
    rows = channel.load(every_row.filter(pk__in=wanted)).in_bulk()
    requeued = 0
    refused: list[tuple[Any, str]] = []
    for done, pk in enumerate(wanted, start=1):
        row = rows.get(pk)
        if row is None:
            reason: str | None = f"{channel.noun} {pk} does not exist"
        elif row.dead_lettered_at is None:
            reason = f"{channel.describe(row)} is not dead-lettered ({row.status().label})"
        else:
            reason = channel.requeue_refusal(row, user) or _requeue_one(channel, row, user)
        if reason is None:
            requeued += 1
        else:
            refused.append((pk, reason))
        if progress is not None and (done % PROGRESS_EVERY == 0 or done == len(wanted)):
            progress(done, len(wanted))
    return RequeueReport(requeued=requeued, refused=refused)


def _requeue_one(channel: Channel[R], row: R, user: Any) -> str | None:
    values = {
        "attempts": 0,
        "next_attempt_at": None,
        "dead_lettered_at": None,
        "claim_token": None,
        "claimed_until": None,
        **channel.requeued(),
    }
    try:
        with transaction.atomic():
            changed = channel.all_rows().dead_lettered().filter(pk=row.pk).update(**values)
            if changed:
                channel.after_requeue(row)
                saga = getattr(row, "saga", None)
                record_action(REQUEUED[channel.model._meta.label], user=user, saga=saga)
                if saga is not None:
                    _journal(row, saga, user)
    except IntegrityError:
        # A row it would collide with (a pending timer of the same name) appeared meanwhile.
        logger.info("bsft_saga: requeue of %s lost a race", channel.describe(row))
        return (
            channel.requeue_refusal(row, user)
            or f"{channel.describe(row)} conflicts with another row"
        )
    if not changed:
        return f"{channel.describe(row)} is no longer dead-lettered"
    return None


def _journal(row: Any, saga: Any, user: Any) -> None:
    """The requeue in its saga's journal: a timer's or an outbox row's event."""
    if isinstance(row, SagaTimeout):
        journal.record_timer_action(row, JournalKind.REQUEUED, user=user, step=saga.step_index)
        return
    journal.record_action(
        saga.pk,
        JournalKind.REQUEUED,
        user=user,
        event_type=row.event_type,
        # An outbox row's pk is its message id; a kept event stores its own.
        message_id=getattr(row, "message_id", row.pk),
        correlation_id=row.correlation_id,
        step=saga.step_index,
    )
