"""The drain: rounds of passes over every channel, and the one loop that repeats them.

A **round** is one pass over due timers (``drain_due``), one over outbox rows nobody
holds (``deliver_pending``), then the kept events no commit applied. :func:`drain` repeats
rounds; the Celery task, ``manage.py drain_saga_timeouts`` and ``SagaHarness`` all call it,
and differ only in when it stops (:class:`Until`).
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from django.db import DatabaseError

from bsft_saga import outbox
from bsft_saga.conf import saga_settings
from bsft_saga.db.connections import refresh_idle_connections
from bsft_saga.engine.handler import apply_stragglers
from bsft_saga.timeouts.dispatcher import DrainReport, drain_due

logger = logging.getLogger(__name__)

#: Seconds a loop with time left waits after a round that lost its database connection,
#: before the next round tries again (while the Celery task's POLL_INTERVAL lasts).
RECONNECT_PAUSE = 0.5


@dataclass(frozen=True)
class RoundReport:
    """What one round (or several, added up) did with due timers and with outbox rows."""

    timers: DrainReport = field(default_factory=DrainReport)
    outbox: outbox.DeliveryReport = field(default_factory=outbox.DeliveryReport)

    def __add__(self, other: RoundReport) -> RoundReport:
        return RoundReport(self.timers + other.timers, self.outbox + other.outbox)

    @property
    def found_work(self) -> bool:
        """Whether a row was fired, settled, delivered or dead-lettered: worth another round.

        A failed attempt is not: the row waits for its retry back-off, and another round
        right away would find it not due (a loop that counted failures as work would spin,
        and used to burn every attempt of a briefly failing receiver within one beat tick).
        """
        t, o = self.timers, self.outbox
        return bool(t.settled or o.delivered or o.dead_lettered or o.unclaimed)


def drain_round(*, batch_size: int | None = None, now: datetime | None = None) -> RoundReport:
    """Fire due timers (``drain_due``), then deliver outbox rows whose delivery was lost.

    ``now`` is the moment the timers are due by (default: the clock); only
    ``drain_saga_timeouts --as-of`` sets it, on development databases. Last, ready kept
    events that no commit applies (a crash between the commit reaching their step and the
    apply, a retry back-off that has run out, a requeue) are applied, and events kept for a
    key whose saga did not start within ``ENGINE.KEEP_EARLY_FOR`` are discarded
    (``apply_stragglers``: only if a flow keeps events, through partial indexes).
    """
    timers = drain_due(batch_size=batch_size, now=now)
    delivered = outbox.deliver_pending(batch_size=batch_size)
    apply_stragglers(limit=batch_size or 100)
    return RoundReport(timers=timers, outbox=delivered)


class Until(enum.Enum):
    """When :func:`drain` stops."""

    #: After one round: ``drain_saga_timeouts``.
    ONE_ROUND = "one round"
    #: After the first round that finds no work: ``--until-empty``, ``SagaHarness``.
    EMPTY = "empty"
    #: After the first round that finds no work, or once ``POLL_INTERVAL`` has passed (the
    #: next beat tick takes over from there): the Celery task.
    POLL_INTERVAL = "poll interval"
    #: Once ``stop`` is set, waiting ``POLL_INTERVAL`` after a round that found no work:
    #: ``--loop``, a dispatcher process.
    STOPPED = "stopped"


#: What :func:`drain` tells its caller after each round: the round's number (from 1) and
#: its report, or the database error that cost it its connection.
RoundObserver = Callable[[int, RoundReport | DatabaseError], None]


def drain(
    until: Until,
    *,
    batch_size: int | None = None,
    now: datetime | None = None,
    stop: threading.Event | None = None,
    on_round: RoundObserver | None = None,
) -> RoundReport:
    """Run rounds (:func:`drain_round`) until ``until`` says to stop; return their sum.

    ``STOPPED``, a long-lived process, replaces a connection that broke or outlived
    ``CONN_MAX_AGE`` before each round (one inside a caller's transaction is left alone).
    The others last one command, test or task (Celery's Django fixup refreshes around a
    task), and their rounds keep the connection: with the default ``CONN_MAX_AGE = 0`` a
    refresh would reconnect before every round. One row never stops a round, so what
    escapes one is the database or a bug. A round that raises a ``DatabaseError`` (a
    failover, a restart, a killed session) is logged, its connection replaced if broken,
    and counts as a round that found no work; a loop with time left goes on —
    ``POLL_INTERVAL`` later for ``STOPPED``, ``RECONNECT_PAUSE`` later for
    ``POLL_INTERVAL`` if that leaves time for a round — and its next round first gives back
    what the lost one had claimed, so those rows are delivered in this run once the
    database answers. A loop that would stop there (``ONE_ROUND``, ``EMPTY``) raises the
    error instead, as it raises anything else.

    ``stop``: for ``STOPPED``, the event that ends the loop (set by a signal handler: the
    round running finishes first, a pause is cut short). ``on_round`` is called after each
    round. ``KeyboardInterrupt`` escapes at once.
    """
    poll = saga_settings.delivery.poll_interval.total_seconds()
    started = time.monotonic()
    stop = stop or threading.Event()
    total = RoundReport()
    number = 0
    while not stop.is_set():
        number += 1
        if until is Until.STOPPED:
            refresh_idle_connections()
        try:
            report = drain_round(batch_size=batch_size, now=now)
        except DatabaseError as exc:
            if until in (Until.ONE_ROUND, Until.EMPTY):
                raise
            logger.exception("bsft_saga drain: round %d lost its database connection", number)
            refresh_idle_connections()
            if on_round is not None:
                on_round(number, exc)
            if (
                until is Until.POLL_INTERVAL
                and time.monotonic() - started + RECONNECT_PAUSE >= poll
            ):
                break
            stop.wait(poll if until is Until.STOPPED else RECONNECT_PAUSE)
            continue
        total += report
        if on_round is not None:
            on_round(number, report)
        if until is Until.ONE_ROUND:
            break
        if until is Until.STOPPED:
            if not report.found_work:
                stop.wait(poll)  # returns early once stop is set
        elif not report.found_work or (
            until is Until.POLL_INTERVAL and time.monotonic() - started >= poll
        ):
            break
    return total
