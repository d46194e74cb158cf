"""``saga_status()``: the numbers an operator checks first, from indexed queries only.

``manage.py saga_status``, ``GET status/`` of the HTTP API, the admin's app index and the
observable gauges of :mod:`bsft_saga.telemetry` all read them from here. Every query is a
count or a ``MIN`` over a partial index of the rows that are still in play (pending timers,
pending and dead-lettered rows, active instances), so the numbers stay cheap however
many retired timers, delivered outbox rows and completed instances the tables keep; the
plans are shown in docs/operations.md and pinned by tests/test_status.py. The
dispatchers' heartbeats (:mod:`bsft_saga.dispatchers`) are one more query, of a small table.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import Count, Min

from bsft_saga import clock
from bsft_saga.conf import STALE_AFTER_AT_LEAST
from bsft_saga.db.datetimes import readable_q
from bsft_saga.dispatchers import (
    DispatcherStatus,
    listed_dispatchers,
    newest_idle_seconds,
    stale_after,
)
from bsft_saga.dispatchers import idle_warning as idle_warning_of
from bsft_saga.models import SagaInstance, SagaKeptEvent, SagaOutboxMessage, SagaTimeout
from bsft_saga.querysets import SagaTimeoutQuerySet, outbox_due_at

__all__ = ["SagaStatus", "dead_letters", "due_timers", "lag_seconds", "saga_status"]


@dataclass(frozen=True)
class SagaStatus:
    """A snapshot of the saga tables; the field names are the JSON keys of ``GET status/``.

    - ``timeouts_due``: pending timers whose ``due_at`` has passed, a timer waiting for its
      retry back-off (``next_attempt_at`` in the future) included: it is late as well.
    - ``timeouts_unconfirmed``: fired timers whose event must still reach some receiver
      again. Always 0: a timer's step and its dispatch confirmation commit in one
      transaction, so there is no such state to count (the key is kept for monitors that
      read it). Unconfirmed timers would be neither pending nor due, nor in the lag.
    - ``outbox_undelivered``: outbox rows neither delivered nor dead-lettered whose time has
      come (a delayed message's ``deliver_at``, any other row's ``created_at``), a row
      waiting for its retry back-off included.
    - ``outbox_scheduled``: delayed messages waiting for their ``deliver_at``; not late, so
      neither due nor in the lag.
    - ``lag_seconds``: now minus the oldest of the due timers' ``due_at`` and the
      due outbox rows' ``deliver_at`` (``created_at`` for a row that is not a
      delayed message); 0 when there is none. A healthy system stays within a
      POLL_INTERVAL or two; a growing lag means nothing drains.
    - ``events_kept``: events kept for a later step of their saga (``keep_early=True``),
      or for a key whose saga has not started yet, not applied yet (dead letters apart).
    - ``kept_dead_lettered``: kept events given up after ``MAX_DISPATCH_ATTEMPTS`` failed
      attempts (``requeue_saga_kept_events`` returns them).
    - ``idle_seconds``: now minus the newest ``last_pass_at`` of the dispatchers that report
      in (``drain_saga_timeouts --loop``, Celery workers running the drain), leaving out
      one more than ``STALE_AFTER`` after now (a clock far ahead, a row written by hand);
      ``None`` when none is left.
    - ``stale_after_seconds``: ``DELIVERY["STALE_AFTER"]``: a dispatcher, or the lag, past
      it is a warning.
    - ``dispatchers``: the dispatchers that passed last, newest first
      (:class:`~bsft_saga.dispatchers.DispatcherStatus`, at most
      :data:`~bsft_saga.dispatchers.LISTED`).

    ``as_dict()`` adds ``idle_warning`` ("no dispatcher has passed in N s" past
    ``stale_after_seconds``, "no dispatcher has reported" when none has; else ``None``).
    """

    active_instances: int
    timeouts_pending: int
    timeouts_due: int
    timeouts_dead_lettered: int
    timeouts_unconfirmed: int
    outbox_undelivered: int
    outbox_scheduled: int
    outbox_dead_lettered: int
    lag_seconds: float
    events_kept: int = 0
    kept_dead_lettered: int = 0
    idle_seconds: float | None = None
    stale_after_seconds: float = STALE_AFTER_AT_LEAST.total_seconds()
    dispatchers: tuple[DispatcherStatus, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The JSON document of ``saga_status --format json`` and ``GET status/``."""
        document: dict[str, Any] = {
            field.name: getattr(self, field.name)
            for field in fields(self)
            if field.name != "dispatchers"
        }
        document["idle_warning"] = self.idle_warning
        document["dispatchers"] = [dispatcher.as_dict() for dispatcher in self.dispatchers]
        return document

    @property
    def idle_warning(self) -> str | None:
        """What to warn of when no dispatcher has passed within ``stale_after_seconds``:
        "no dispatcher has passed in N s" ("no dispatcher has reported" when none reports);
        ``None`` while one has."""
        return idle_warning_of(self.idle_seconds, timedelta(seconds=self.stale_after_seconds))

    @property
    def lagging(self) -> bool:
        """Whether the lag is greater than ``stale_after_seconds``: rows wait for a drain."""
        return self.lag_seconds > self.stale_after_seconds

    @property
    def dead_letters(self) -> int:
        """Dead-lettered timers, outbox rows and kept events still stored."""
        return self.timeouts_dead_lettered + self.outbox_dead_lettered + self.kept_dead_lettered


def saga_status(*, now: datetime | None = None) -> SagaStatus:
    """Count what is active, waiting, late and given up, at ``now`` (default: the clock).

    Eleven numbers from nine small queries, each a count or a ``MIN`` over a partial
    index, and the dispatchers from a tenth. The queries do not run in one snapshot: under
    load the numbers may disagree by the rows that moved between two of them.
    """
    moment = now or clock.now()
    threshold = stale_after()
    reporting = listed_dispatchers(now=moment, threshold=threshold)
    due = _due_timers(moment).aggregate(count=Count("id"), oldest=Min("due_at"))
    outbox = _due_outbox(moment)
    # Pending minus due: the delayed messages still waiting, counted without reading them
    # (there may be many more of them than of anything late).
    outbox_pending = SagaOutboxMessage.objects.pending().count()
    return SagaStatus(
        active_instances=SagaInstance.objects.active().count(),
        timeouts_pending=SagaTimeout.objects.pending().count(),
        timeouts_due=due["count"],
        timeouts_dead_lettered=SagaTimeout.objects.dead_lettered().count(),
        timeouts_unconfirmed=0,
        outbox_undelivered=outbox["count"],
        outbox_scheduled=max(0, outbox_pending - outbox["count"]),
        outbox_dead_lettered=SagaOutboxMessage.objects.dead_lettered().count(),
        lag_seconds=_lag(moment, due["oldest"], outbox["oldest"]),
        events_kept=SagaKeptEvent.objects.pending().count(),
        kept_dead_lettered=SagaKeptEvent.objects.dead_lettered().count(),
        idle_seconds=newest_idle_seconds(reporting),
        stale_after_seconds=threshold.total_seconds(),
        dispatchers=reporting,
    )


def due_timers(*, now: datetime | None = None) -> int:
    """How many pending timers are due (``saga_status().timeouts_due``)."""
    return _due_timers(now or clock.now()).count()


def lag_seconds(*, now: datetime | None = None) -> float:
    """How late the oldest due timer or due outbox row is, in seconds (0: none)."""
    moment = now or clock.now()
    oldest_timer = _due_timers(moment).aggregate(oldest=Min("due_at"))["oldest"]
    return _lag(moment, oldest_timer, _due_outbox(moment)["oldest"])


def dead_letters() -> int:
    """Dead-lettered timers, outbox rows and kept events still stored."""
    return (
        SagaTimeout.objects.dead_lettered().count()
        + SagaOutboxMessage.objects.dead_lettered().count()
        + SagaKeptEvent.objects.dead_lettered().count()
    )


def _due_timers(now: datetime) -> SagaTimeoutQuerySet:
    # Not SagaTimeout.objects.due(): that is what a dispatcher may claim (no live claim, an
    # order); a claimed or backing-off row is still late. A due time that cannot be read
    # back (year 10000, stored by hand) is not late; on SQLite, whose dates are text, it
    # would sort as due and then fail the MIN() every status page reads.
    readable = readable_q("due_at", connection.vendor)
    return SagaTimeout.objects.pending().filter(readable, due_at__lte=now)


def _due_outbox(now: datetime) -> dict[str, Any]:
    # How many pending rows are due at ``now`` and the oldest due time among them, down the
    # partial index of pending rows by due time (deliver_at, else created_at). A due time
    # that cannot be read back is not late, as for timers.
    readable = readable_q("due_at", connection.vendor)  # the alias due() gives the due time
    return (
        SagaOutboxMessage.objects.due(now)
        .filter(readable)
        .aggregate(count=Count("id"), oldest=Min(outbox_due_at()))
    )


def _lag(now: datetime, *oldest: datetime | None) -> float:
    moments = [moment for moment in oldest if moment is not None]
    if not moments:
        return 0.0
    return max(0.0, (now - min(moments)).total_seconds())
