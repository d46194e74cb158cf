"""Claims a pass could not give back because its database connection was lost.

A pass that loses its connection mid-batch (a failover, a restart, ``pg_terminate_backend``)
cannot release what it claimed: the batch rolled back, but the claim committed earlier and
would hold the rows until ``CLAIM_LEASE`` runs out. The pass remembers its token here, and
the next pass of the same channel in this process gives the rows back first, as soon as the
database answers again, so they fire within a poll interval instead of a lease.

The row whose delivery (its receivers, or its writes) was running when the connection went
is not given back free: it is charged a failed attempt, because it may be what broke the
connection (a receiver that kills its own session does that every time), and it is then
claimed alone; its batch-mates are released without a charge.

If the connection broke during a commit, that commit may have happened after all: giving
back then also counts the rows the token delivered, so totals include them.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError

from bsft_saga.conf import saga_settings
from bsft_saga.delivery.channel import Channel
from bsft_saga.delivery.claim import alone
from bsft_saga.delivery.failures import lost_connection_reason, record_failure
from bsft_saga.querysets import DeliveryQuerySet

logger = logging.getLogger("bsft_saga.delivery")


@dataclass(frozen=True)
class _Orphan:
    kind: type[Channel[Any]]
    token: uuid.UUID
    suspect: Any = None  # the pk of the row to charge
    reason: str = ""


_lock = threading.Lock()
_orphans: list[_Orphan] = []


@dataclass(frozen=True)
class GivenBack:
    """Rows released from lost claims, and rows those claims turned out to have delivered."""

    released: int = 0
    delivered: int = 0


def remember(
    channel: Channel[Any], token: uuid.UUID, suspect: Any = None, reason: str = ""
) -> None:
    """Keep ``token`` to give its rows back once the database answers again; ``suspect``:
    the pk of the row to charge ``reason`` instead.

    The rows held by :func:`~bsft_saga.delivery.claim.alone` of ``token`` (its pass claimed
    a single row) are given back too.
    """
    with _lock:
        _orphans.append(_Orphan(type(channel), token, suspect, reason))


class Guard:
    """What a guarded pass tells its guard: the row whose delivery is under way."""

    def __init__(self) -> None:
        self.in_flight: Any = None


@contextmanager
def guarding(channel: Channel[Any], token: uuid.UUID) -> Iterator[Guard]:
    """Around one pass: if it ends in an exception, its claims are not left to the lease.

    A lost connection remembers ``token`` for :func:`give_back`, with the row the pass had
    in flight (``Guard.in_flight``) to charge; any other exception (a shutdown:
    ``KeyboardInterrupt``, ``SystemExit``) gives the rows back at once, free, while the
    connection still works.
    """
    guard = Guard()
    try:
        yield guard
    except BaseException as exc:
        if isinstance(exc, DatabaseError) and guard.in_flight is not None:
            remember(channel, token, guard.in_flight.pk, lost_connection_reason(exc))
        else:
            remember(channel, token)
        if not isinstance(exc, DatabaseError):
            give_back(channel, stopped_by=exc)
        raise


def waiting(channel: Channel[Any]) -> int:
    """How many lost claims of ``channel``'s table wait to be given back."""
    with _lock:
        return sum(1 for orphan in _orphans if orphan.kind is type(channel))


def give_back(channel: Channel[Any], *, stopped_by: BaseException | None = None) -> GivenBack:
    """Release the pending rows of every lost claim of ``channel``'s table.

    ``stopped_by``: the exception that stopped the pass (a shutdown), which the log then
    names, instead of a lost connection. Never raises: while the database is still
    unreachable the claims are kept for the next try (and, at worst, their lease runs out
    as it would have anyway).
    """
    with _lock:
        mine = [orphan for orphan in _orphans if orphan.kind is type(channel)]
    released = delivered = 0
    for entry in mine:
        token = entry.token
        try:
            if entry.suspect is not None:
                _charge(channel, entry)
            released += _held(channel, token).update(claim_token=None, claimed_until=None)
            delivered += channel.delivered_rows().filter(claim_token__in=_tokens(token)).count()
        except Exception:  # the database still unreachable, or a transaction to roll back
            logger.warning("bsft_saga: could not give back %s claims yet; kept", channel.noun)
            break
        with _lock:
            _orphans.remove(entry)
    if stopped_by is not None:
        # Said apart: "lost its connection" would send whoever reads it after a Ctrl-C or
        # a worker's shutdown looking for a database failure that never happened.
        if released:
            logger.info(
                "bsft_saga: gave back %d %s row(s) of a pass stopped by %s; the next pass "
                "claims them at once",
                released,
                channel.noun,
                type(stopped_by).__name__,
            )
    elif released or delivered:
        logger.info(
            "bsft_saga: gave back %d %s row(s) of a pass that lost its connection "
            "(%d had been delivered before)",
            released,
            channel.noun,
            delivered,
        )
    return GivenBack(released=released, delivered=delivered)


def _tokens(token: uuid.UUID) -> tuple[uuid.UUID, uuid.UUID]:
    """The tokens a pass's rows may carry: its own, or the one it writes for a single row."""
    return (token, alone(token))


def _held(channel: Channel[Any], token: uuid.UUID) -> DeliveryQuerySet[Any]:
    return channel.pending_rows().filter(claim_token__in=_tokens(token))


def _charge(channel: Channel[Any], orphan: _Orphan) -> None:
    suspect = channel.load(_held(channel, orphan.token).filter(pk=orphan.suspect)).first()
    if suspect is not None:
        config = saga_settings.delivery
        record_failure(channel, suspect, suspect.claim_token, orphan.reason, config)
        logger.warning("bsft_saga: %s charged: %s", channel.describe(suspect), orphan.reason)
