"""Claims a pass could not give back because its database connection was lost.

A pass that loses its connection mid-batch (a failover, a restart, ``pg_terminate_backend``)
cannot release what it claimed: the batch rolled back, but the claim committed earlier and
would hold the rows until ``CLAIM_LEASE`` runs out. The pass remembers its token here, and
the next pass of the same channel in this process gives the rows back first, as soon as the
database answers again, so they fire within a poll interval instead of a lease.

If the connection broke during the batch's COMMIT, the batch may have committed after all:
giving back then also counts the rows the token delivered, so totals include them.
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

from bsft_saga.delivery.channel import Channel

logger = logging.getLogger("bsft_saga.delivery")

_lock = threading.Lock()
_orphans: list[tuple[type[Channel[Any]], uuid.UUID]] = []


@dataclass(frozen=True)
class GivenBack:
    """Rows released from lost claims, and rows those claims turned out to have delivered."""

    released: int = 0
    delivered: int = 0


def remember(channel: Channel[Any], token: uuid.UUID) -> None:
    """Keep ``token`` to give its rows back once the database answers again."""
    with _lock:
        _orphans.append((type(channel), token))


@contextmanager
def guarding(channel: Channel[Any], token: uuid.UUID) -> Iterator[None]:
    """Around one pass: if it ends in an exception, its claims are not left to the lease.

    A lost connection remembers ``token`` for :func:`give_back`; any other exception (a
    shutdown: ``KeyboardInterrupt``, ``SystemExit``) gives the rows back at once, while the
    connection still works.
    """
    try:
        yield
    except BaseException as exc:
        remember(channel, token)
        if not isinstance(exc, DatabaseError):
            give_back(channel)
        raise


def waiting(channel: Channel[Any]) -> int:
    """How many lost claims of ``channel``'s table wait to be given back."""
    with _lock:
        return sum(1 for kind, _token in _orphans if kind is type(channel))


def give_back(channel: Channel[Any]) -> GivenBack:
    """Release the open rows of every lost claim of ``channel``'s table.

    Never raises: while the database is still unreachable the claims are kept for the next
    try (and, at worst, their lease runs out as it would have anyway).
    """
    with _lock:
        mine = [(kind, token) for kind, token in _orphans if kind is type(channel)]
    released = delivered = 0
    for entry in mine:
        token = entry[1]
        try:
            released += channel.held(token).update(claim_token=None, claimed_until=None)
            delivered += channel.delivered_rows().filter(claim_token=token).count()
        except Exception:  # the database still unreachable, or a transaction to roll back
            logger.warning("bsft_saga: could not give back %s claims yet; kept", channel.noun)
            break
        with _lock:
            _orphans.remove(entry)
    if released or delivered:
        logger.info(
            "bsft_saga: gave back %d %s row(s) of a pass that lost its connection "
            "(%d had been delivered before)",
            released,
            channel.noun,
            delivered,
        )
    return GivenBack(released=released, delivered=delivered)
