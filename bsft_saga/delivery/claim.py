"""Claiming a batch of ready rows for one pass, in a short transaction of its own."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Generic

from django.db import DataError, connection, transaction
from django.db.models import F, QuerySet

from bsft_saga.conf import saga_settings
from bsft_saga.db import sql
from bsft_saga.db.mysql import retrying_deadlocks
from bsft_saga.delivery.channel import Channel, R
from bsft_saga.delivery.failures import CONNECTION_LOST, failure_reason
from bsft_saga.delivery.heartbeat import Beat
from bsft_saga.delivery.report import Outcome
from bsft_saga.models import DeliveryRow
from bsft_saga.querysets import DeliveryQuerySet

logger = logging.getLogger("bsft_saga.delivery")

#: What a row's last attempt records when the pass that claimed it alone never finished:
#: its lease ran out with the row still pending and the claim never given back.
ABANDONED = (
    "ClaimAbandoned: the pass that claimed it alone stopped before it finished (its claim "
    "lease ran out); the process may have been killed while delivering it"
)

#: The version number a claim of a single row writes into its token, where every other
#: token is a random version 4 UUID: 0, which no generator writes. Not 8 (RFC 9562's
#: version for implementations): MariaDB's UUID column refuses versions above 7.
_ALONE_VERSION = 0
_VERSION_BITS = 0xF << 76


def alone(token: uuid.UUID) -> uuid.UUID:
    """The token a claim that takes a single row writes instead of ``token``.

    The same bits, with the UUID version set to 0: a pass that later finds the claim run
    out can tell that this row was the only one its pass ran, so the row may be what
    stopped it, without any other write having said so.
    """
    return uuid.UUID(int=(token.int & ~_VERSION_BITS) | (_ALONE_VERSION << 76))


def claimed_alone(token: uuid.UUID | None) -> bool:
    """Whether ``token`` is the token of a claim that took a single row (:func:`alone`)."""
    return token is not None and token.version == _ALONE_VERSION


@dataclass(frozen=True)
class Claimed(Generic[R]):
    """What :func:`claim` took: the rows to deliver, and those it gave up instead."""

    rows: list[R]
    #: Rows whose claims ran out ``MAX_DISPATCH_ATTEMPTS`` times: dead-lettered, not claimed.
    dead_lettered: list[R]
    #: The token that holds ``rows``: the one asked for, or :func:`alone` of it for one row.
    token: uuid.UUID
    #: Rows (or their sagas) holding a value that cannot be read back: dead-lettered.
    unreadable: int = 0
    #: What the channel read along for the steps the rows wake, by row pk
    #: (:meth:`~bsft_saga.delivery.channel.Channel.load_related`).
    known: dict[Any, Any] = field(default_factory=dict)


def claim(
    channel: Channel[R],
    *,
    limit: int,
    token: uuid.UUID,
    now: datetime,
    lease: timedelta,
    max_attempts: int | None = None,
    only: Iterable[Any] | None = None,
    beat: Beat | None = None,
) -> Claimed[R]:
    """Claim up to ``limit`` of the channel's claimable rows (``only``: among these pks).

    The claim (this pass's ``token`` and a lease until ``now + lease``) commits in its own
    short transaction, before anything is published: a pass that dies later leaves its rows
    claimed until the lease has run out, and a pass whose lease ran out is fenced, because
    every later write of its rows matches on its token. A claim that takes a single row
    writes :func:`alone` of ``token`` instead (``Claimed.token`` says which). Returns the
    claimed rows, in delivery order, with the channel's related rows loaded. Rows it
    dead-letters instead are counted (the channel's ``DEAD_LETTERED`` counter) and returned
    apart.

    A row whose previous claim ran out (its pass never finished and never gave it back)
    is claimed **alone**. Nothing on disk says which row of a batch its dead pass was
    running, so one held by a batch's claim is claimed again free: if it is what killed
    that pass, it now kills a pass that runs nothing else. One whose claim had taken it
    alone is what its pass was running: claiming it again counts an attempt
    (``ClaimAbandoned``), and at ``max_attempts`` (default ``MAX_DISPATCH_ATTEMPTS``) it is
    dead-lettered instead. So a crash charges at most the row its pass ran alone, and a row
    that kills every pass that runs it is given up after ``max_attempts`` solo deaths.

    ``beat``: the pass's heartbeat. The claimed rows name its dispatcher in ``claimed_by``
    (``None`` when nobody reports), and it reports in the claim's transaction
    (:mod:`~bsft_saga.delivery.heartbeat`).
    """
    if max_attempts is None:
        max_attempts = saga_settings.delivery.max_dispatch_attempts
    candidates = channel.claimable(now)
    if only is not None:
        candidates = candidates.filter(pk__in=list(only))
    until = now + lease
    beat = beat or Beat()
    fields: dict[str, Any] = {
        "claim_token": token,
        "claimed_until": until,
        "claimed_by": beat.claimer,
    }
    every_row = channel.all_rows()
    if connection.features.has_select_for_update_skip_locked:
        asked = token

        def locked_claim() -> Any:
            held = 0
            try:
                with transaction.atomic():
                    # Rows another pass is claiming right now are skipped, not waited for, so
                    # concurrent passes take disjoint batches. The locking query reads the table
                    # alone, down the ready index; the related rows of those it took are loaded
                    # after it (joined into it, the planner may read every saga before the LIMIT).
                    locking = candidates.select_for_update(skip_locked=True)
                    read, unreadable, known = _readable(channel, locking[:limit])
                    _give_up_unreadable(channel, every_row, unreadable, now)
                    rows, given_up = _sort_out(read, max_attempts)
                    _give_up(channel, every_row.filter(pk__in=_pks(given_up)), given_up, now)
                    token = fields["claim_token"] = _token_for(rows, asked)
                    counted = _counted(rows)
                    if counted:  # abandoned by a pass that ran it alone: the attempt, in SQL
                        every_row.filter(pk__in=_pks(rows)).update(**fields, **counted)
                    elif rows:
                        sql.update_each(channel.model, fields, {}, _pks(rows))
                    held = len(rows)
                    beat.claimed(held)
            except BaseException:
                beat.claim_undone(held)  # rolled back: not held (and maybe claimed again)
                raise
            return unreadable, known, rows, given_up, token

        # InnoDB may break a deadlock by rolling the claim back whole: it is claimed again.
        unreadable, known, rows, given_up, token = retrying_deadlocks(locked_claim)
    else:
        # Read which rows are ready outside the transaction (one that reads first and
        # writes later can be refused SQLite's write lock), then write with the
        # conditions again: only rows still claimable while the UPDATE runs are taken.
        # (Of two rows meant, another claimer may take one: the other is then held by a
        # batch's token, and a crash while it runs charges nothing; its next claim is alone.)
        read, unreadable, known = _readable(channel, candidates[:limit], related=False)
        rows, given_up = _sort_out(read, max_attempts)
        token = fields["claim_token"] = _token_for(rows, token)
        channel.load_related(given_up)  # the claimed ones: reloaded
        with transaction.atomic():
            still_claimable = channel.claimable(now)
            _give_up_unreadable(channel, still_claimable, unreadable, now)
            _give_up(channel, still_claimable.filter(pk__in=_pks(given_up)), given_up, now)
            if rows:
                still_claimable.filter(pk__in=_pks(rows)).update(**fields, **_counted(rows))
                held = channel.held(token).in_ready_order()
                rows, also, known = _readable(channel, held)
                _give_up_unreadable(channel, channel.held(token), also, now)
                unreadable += also
            beat.claimed(len(rows))
    for row in rows:
        row.claim_token, row.claimed_until, row.claimed_by = token, until, beat.claimer
    # Committed (never a claim rolled back and run again): logged and counted like the rows
    # a delivery dead-letters.
    for row in given_up:
        logger.error(
            "bsft_saga: %s dead-lettered: its claim ran out %d times (%s)",
            channel.describe(row),
            row.attempts + 1,
            ABANDONED,
        )
        channel.count(Outcome.DEAD_LETTERED, channel.saga_type(row))
    for pk, reason in unreadable:
        logger.error("bsft_saga: %s %s dead-lettered: %s", channel.noun, pk, reason)
    if unreadable:
        channel.count(Outcome.DEAD_LETTERED, "", len(unreadable))
    return Claimed(rows, given_up, token, len(unreadable), known)


#: What a value the driver cannot read back raises while rows load: psycopg's "timestamp
#: too large (after year 10K)" (a ``DataError``), SQLite's converters a ``ValueError``.
_UNREADABLE_ERRORS = (DataError, ValueError, OverflowError)


def _readable(
    channel: Channel[R], rows: QuerySet[R], *, related: bool = True
) -> tuple[list[R], list[tuple[Any, str]], dict[Any, Any]]:
    """Load ``rows`` (with their related rows, if ``related``); those that cannot be read,
    as ``(pk, reason)``; and what the channel read along (``Channel.load_related``).

    A row written by an earlier release, or by hand, may hold a value its driver cannot
    read back (a date after the year 9999 in UTC). Loaded with the others it would fail
    every claim, and be the first ready row of each: no row would ever be delivered again.
    Such a load is retried row by row (rare: it costs one query per row of that batch).
    """
    try:
        loaded = channel.read(rows)
        return loaded, [], channel.load_related(loaded) if related else {}
    except _UNREADABLE_ERRORS:
        pass
    loaded, unreadable, known = [], [], {}
    for pk in rows.values_list("pk", flat=True):
        try:
            one = channel.read(channel.all_rows().filter(pk=pk))
            if related:
                known.update(channel.load_related(one))
        except _UNREADABLE_ERRORS as exc:
            unreadable.append((pk, f"{UNREADABLE}: {failure_reason(exc)}"))
        else:
            loaded += one
    return loaded, unreadable, known


#: How a row whose stored values cannot be read back is dead-lettered.
UNREADABLE = (
    "Unreadable: a stored value of this row or of its saga cannot be read back (fix or "
    "delete it, then requeue the row)"
)


def _give_up_unreadable(
    channel: Channel[R], where: DeliveryQuerySet[R], rows: list[tuple[Any, str]], now: datetime
) -> None:
    for pk, reason in rows:
        # No journal entry: nothing of the row could be read to write one.
        retirement = channel.retire([], Outcome.DEAD_LETTERED, now, reason=reason)
        where.filter(pk=pk).update(
            attempts=F("attempts") + 1, last_error=reason, **retirement.stamp
        )


def _pks(rows: Sequence[Any]) -> list[Any]:
    return [row.pk for row in rows]


def _token_for(rows: Sequence[Any], token: uuid.UUID) -> uuid.UUID:
    return alone(token) if len(rows) == 1 else token


def _abandoned(row: DeliveryRow) -> bool:
    # Pending and claimable, yet still carrying a token: the lease of a claim that was neither
    # finished (retired, or failed and released) nor given back ran out.
    return row.claim_token is not None


def _lost_alone(row: DeliveryRow) -> bool:
    # Abandoned by a pass that ran nothing else: the row it was running when it stopped.
    return _abandoned(row) and claimed_alone(row.claim_token)


def _took_its_pass_down(row: DeliveryRow) -> bool:
    # Its last attempt ended with its pass's database connection: delivered with others
    # again, it could take their commit down with it.
    return row.last_error.startswith(CONNECTION_LOST)


def _sort_out(rows: list[R], max_attempts: int) -> tuple[list[R], list[R]]:
    """The rows to claim (the first suspect alone, if any) and those to give up.

    A suspect is a row that may have killed the pass that last held it: an abandoned one,
    or one whose delivery lost its pass's connection. Only one abandoned by a pass that
    held it alone is charged, and so given up at the limit.
    """
    given_up = [r for r in rows if _lost_alone(r) and r.attempts + 1 >= max_attempts]
    suspects = [r for r in rows if (_abandoned(r) or _took_its_pass_down(r)) and r not in given_up]
    if suspects:
        return suspects[:1], given_up
    return [r for r in rows if not _abandoned(r)], given_up


def _counted(rows: list[R]) -> dict[str, Any]:
    """The attempt a claim counts: one for a row abandoned by a pass that held it alone
    (claimed alone again), none otherwise."""
    if len(rows) == 1 and _lost_alone(rows[0]):
        rows[0].attempts += 1
        rows[0].last_error = ABANDONED
        return {"attempts": F("attempts") + 1, "last_error": ABANDONED}
    return {}


def _give_up(channel: Channel[R], where: DeliveryQuerySet[R], rows: list[R], now: datetime) -> None:
    if not rows:
        return
    retirement = channel.retire(rows, Outcome.DEAD_LETTERED, now, reason=ABANDONED)
    where.update(attempts=F("attempts") + 1, last_error=ABANDONED, **retirement.stamp)
    retirement.journal()
