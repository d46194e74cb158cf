"""Claim a batch of rows, then deliver it in one transaction with a savepoint per row."""

from __future__ import annotations

import asyncio
import enum
import logging
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, connection, transaction

from bsft_saga import clock, sql, telemetry
from bsft_saga.conf import TimeoutSettings
from bsft_saga.delivery.backoff import retry_delay
from bsft_saga.delivery.channel import Channel, R
from bsft_saga.delivery.failures import failure_reason
from bsft_saga.events.sending import send_envelope

logger = logging.getLogger("bsft_saga.delivery")

_NO_LEASE = {"claimed_until": None}


class Outcome(enum.Enum):
    """What delivering one claimed row came to."""

    DELIVERED = "delivered"
    FAILED = "failed"  # an attempt failed; the row waits for its retry
    DEAD_LETTERED = "dead_lettered"
    UNCLAIMED = "unclaimed"  # cancelled, replaced or taken over since it was claimed


@dataclass(frozen=True)
class Delivered:
    """The outcome of each row of one batch, in delivery order."""

    outcomes: tuple[tuple[Any, Outcome], ...] = ()

    def count(self, outcome: Outcome) -> int:
        return sum(1 for _row, o in self.outcomes if o is outcome)

    def by_saga_type(self, channel: Channel[Any], outcome: Outcome) -> Counter[str]:
        return Counter(channel.saga_type(row) for row, o in self.outcomes if o is outcome)


def claim(
    channel: Channel[R],
    *,
    limit: int,
    token: uuid.UUID,
    now: datetime,
    lease: timedelta,
    only: Iterable[Any] | None = None,
) -> list[R]:
    """Claim up to ``limit`` of the channel's claimable rows (``only``: among these pks).

    The claim (this pass's ``token`` and a lease until ``now + lease``) commits in its own
    short transaction, before anything is published: a pass that dies later leaves its rows
    claimed until the lease has run out, and a pass whose lease ran out is fenced, because
    every later write of its rows matches on its token. Returns the claimed rows, in
    delivery order, with the channel's related rows loaded.
    """
    candidates = channel.claimable(now)
    if only is not None:
        candidates = candidates.filter(pk__in=list(only))
    until = now + lease
    fields = {"claim_token": token, "claimed_until": until}
    every_row = channel.all_rows()
    features = connection.features
    with transaction.atomic():
        if features.has_select_for_update_skip_locked:
            # Rows another pass is claiming right now are skipped, not waited for, so
            # concurrent passes take disjoint batches.
            of = ("self",) if features.has_select_for_update_of else ()
            locking = channel.load(candidates).select_for_update(skip_locked=True, of=of)
            rows: list[R] = list(locking[:limit])
            if rows:
                every_row.filter(pk__in=[row.pk for row in rows]).update(**fields)
        else:
            # One conditional UPDATE is the fence: it takes only rows that are still
            # claimable while it runs (SQLite runs one writer at a time).
            every_row.filter(pk__in=candidates.values("pk")[:limit]).update(**fields)
            rows = list(channel.load(channel.held(token)).in_ready_order())
    for row in rows:
        row.claim_token, row.claimed_until = token, until
    return rows


def deliver(
    channel: Channel[R], rows: Sequence[R], token: uuid.UUID, config: TimeoutSettings
) -> Delivered:
    """Deliver claimed ``rows``; call it inside the ``transaction.atomic`` of the batch.

    Each row runs in its own savepoint: stamped delivered (only while ``token`` still holds
    it), then published. A row whose envelope cannot be built or whose receivers raise
    rolls back alone and is recorded as a failed attempt; the others go on. A failure that
    broke the transaction itself (the connection is gone) is re-raised: the whole batch
    rolls back and its rows are claimed again after their lease.
    """
    if not connection.in_atomic_block:
        raise RuntimeError("deliver() runs inside the batch's transaction.atomic()")
    return Delivered(tuple((row, _deliver_one(channel, row, token, config)) for row in rows))


def _deliver_one(channel: Channel[R], row: R, token: uuid.UUID, config: TimeoutSettings) -> Outcome:
    try:
        envelope = channel.envelope(row, token)
        with transaction.atomic():
            retire = {**channel.delivered(clock.now()), **_NO_LEASE, "next_attempt_at": None}
            stamped = sql.update(channel.model, retire, channel.where_held(row, token))
            if not stamped:
                return Outcome.UNCLAIMED
            with channel.publishing(row):
                send_envelope(envelope, isolated=True)
    except (Exception, asyncio.CancelledError) as exc:
        # A cancellation raised by a woken step is that row's failure, not a shutdown.
        _raise_if_transaction_broken(exc)
        logger.exception("bsft_saga: %s failed", channel.describe(row))
        return record_failure(channel, row, token, exc, config)
    return Outcome.DELIVERED


def record_failure(
    channel: Channel[R],
    row: R,
    token: uuid.UUID,
    exc: BaseException,
    config: TimeoutSettings,
) -> Outcome:
    """Count a failed attempt of ``row``: retry after the back-off, or dead-letter it.

    The record is written only while ``token`` still holds the row, in a savepoint of its
    own: a record that cannot be written is logged and leaves the row to its lease (it is
    tried again once that has passed); it never stops the batch.
    """
    reason = failure_reason(exc)
    attempts = row.attempts + 1
    now = clock.now()
    values: dict[str, Any] = {"attempts": attempts, "last_error": reason, **_NO_LEASE}
    if attempts >= config.max_dispatch_attempts:
        outcome = Outcome.DEAD_LETTERED
        values.update(
            channel.dead_lettered(now, reason), dead_lettered_at=now, next_attempt_at=None
        )
    else:
        outcome = Outcome.FAILED
        delay = retry_delay(attempts, base=config.retry_backoff, cap=config.max_retry_delay)
        values.update(next_attempt_at=now + delay, claim_token=None)
    try:
        with transaction.atomic():
            recorded = channel.held(token).filter(pk=row.pk).update(**values)
    except DatabaseError as error:
        _raise_if_transaction_broken(error)
        logger.exception("bsft_saga: could not record the failure of %s", channel.describe(row))
        return Outcome.FAILED
    return outcome if recorded else Outcome.UNCLAIMED


def count_outcomes(channel: Channel[Any], delivered: Delivered) -> None:
    """Add a committed batch's deliveries and dead letters to the channel's counters."""
    for outcome, counter in (
        (Outcome.DELIVERED, channel.delivered_counter),
        (Outcome.DEAD_LETTERED, channel.dead_lettered_counter),
    ):
        if counter is not None:
            for saga_type, n in delivered.by_saga_type(channel, outcome).items():
                telemetry.count(counter, saga_type, n)


def _raise_if_transaction_broken(exc: BaseException) -> None:
    # Rolling back to the row's savepoint failed, or Django closed the connection: the
    # database is gone (failover, a killed session), not this row. Nothing more of the
    # batch can be written, so it must not be counted row by row either.
    if connection.needs_rollback or connection.closed_in_transaction:
        raise exc
