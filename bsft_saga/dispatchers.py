"""Which dispatchers report in, and which went quiet: the reading side of the heartbeats.

A process running passes inside :func:`bsft_saga.delivery.heartbeat.reporting` keeps a
``SagaDispatcher`` row. It is **stale** once its ``last_pass_at`` is older than
``DELIVERY["STALE_AFTER"]`` (three ``POLL_INTERVAL`` s, at least a minute, by default): an
idle dispatcher reports once per ``POLL_INTERVAL`` and a busy one at every pass, so a stale
one has died, hangs, or is cut off from the database. A ``last_pass_at`` more than
``STALE_AFTER`` after now is no sign of life either (a host whose clock runs far ahead, a
row written by hand): that dispatcher is stale too, and ``idle_seconds`` is never taken
from it. One whose ``last_pass_at`` cannot be read back (year 10000, written by hand) is
not listed; a ``started_at`` that cannot be read is ``None``. ``saga_status()``,
``GET status/``, the admin's status panel and a claimed row's admin page read them from
here.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connections
from django.db.models import Case, QuerySet, When

from bsft_saga import clock
from bsft_saga.conf import saga_settings
from bsft_saga.db.datetimes import readable_q, readable_rows, unreadable_fields
from bsft_saga.models import DeliveryRow, SagaDispatcher
from bsft_saga.querysets import DeliveryStatus

__all__ = [
    "LISTED",
    "Claimer",
    "DispatcherStatus",
    "claimer_of",
    "idle_warning",
    "listed_dispatchers",
    "newest_idle_seconds",
    "stale_after",
]

#: The most dispatchers a status lists: those that passed last. A Celery pool that
#: replaces its children often leaves a row per child until the purge prunes them.
LISTED = 50


def stale_after() -> timedelta:
    """``DELIVERY["STALE_AFTER"]``, resolved: a dispatcher whose last pass is older is stale."""
    return saga_settings.delivery.stale_after


@dataclass(frozen=True)
class DispatcherStatus:
    """One dispatcher in a status; ``as_dict()`` is its entry in ``dispatchers``.

    ``idle_seconds``: now minus ``last_pass_at`` (never negative: the dispatcher's host
    may run a little ahead); ``stale``: whether that is more than ``STALE_AFTER``, or
    ``last_pass_at`` lies more than ``STALE_AFTER`` after now, and then ``ahead_seconds``
    says how far after now (``None`` for any other). ``started_at``: ``None`` when the
    stored value cannot be read back.
    """

    id: uuid.UUID
    kind: str
    host: str
    pid: int
    started_at: datetime | None
    last_pass_at: datetime
    delivered: int
    claims: int
    idle_seconds: float
    stale: bool
    ahead_seconds: float | None = None

    @classmethod
    def of(cls, row: SagaDispatcher, *, now: datetime, stale_after: timedelta) -> DispatcherStatus:
        assert row.last_pass_at is not None  # listed_dispatchers() reads passed ones only
        heartbeat = _Heartbeat.of(row.last_pass_at, now, stale_after)
        return cls(
            id=row.id,
            kind=row.kind,
            host=row.host,
            pid=row.pid,
            started_at=None if "started_at" in unreadable_fields(row) else row.started_at,
            last_pass_at=row.last_pass_at,
            delivered=row.delivered,
            claims=row.claims,
            idle_seconds=heartbeat.idle_seconds,
            stale=heartbeat.stale,
            ahead_seconds=heartbeat.ahead_seconds,
        )

    def as_dict(self) -> dict[str, Any]:
        """JSON-able: the id as a string, the times in ISO 8601."""
        return {
            "id": str(self.id),
            "kind": self.kind,
            "host": self.host,
            "pid": self.pid,
            "started_at": None if self.started_at is None else self.started_at.isoformat(),
            "last_pass_at": self.last_pass_at.isoformat(),
            "delivered": self.delivered,
            "claims": self.claims,
            "idle_seconds": self.idle_seconds,
            "stale": self.stale,
        }


@dataclass(frozen=True)
class _Heartbeat:
    """What a ``last_pass_at`` says at ``now``: the one judgement of the status and of a
    claimed row's page."""

    idle_seconds: float
    stale: bool
    ahead_seconds: float | None

    @classmethod
    def of(cls, last_pass_at: datetime, now: datetime, threshold: timedelta) -> _Heartbeat:
        since = (now - last_pass_at).total_seconds()
        limit = threshold.total_seconds()
        # Never negative: the dispatcher's host may run a little ahead of this one. Far
        # ahead (a clock gone wrong, a row written by hand), it proves nothing alive.
        ahead = -since if -since > limit else None
        return cls(max(0.0, since), ahead is not None or since > limit, ahead)


def listed_dispatchers(
    *, now: datetime | None = None, threshold: timedelta | None = None
) -> tuple[DispatcherStatus, ...]:
    """The :data:`LISTED` dispatchers that passed last, newest pass first, those whose pass
    lies more than ``threshold`` after ``now`` last (one query of a small table); stale past
    ``threshold`` (default :func:`stale_after`). A row whose ``last_pass_at`` cannot be read
    back is left out."""
    moment = now or clock.now()
    threshold = threshold or stale_after()
    # Far-ahead rows sort last, so that a few of them never hide the live ones.
    ahead = Case(When(last_pass_at__gt=moment + threshold, then=1), default=0)
    rows = _readable_heartbeats().order_by(ahead, "-last_pass_at")
    return tuple(
        DispatcherStatus.of(row, now=moment, stale_after=threshold) for row in rows[:LISTED]
    )


def newest_idle_seconds(dispatchers: Iterable[DispatcherStatus]) -> float | None:
    """``idle_seconds`` of the newest pass among ``dispatchers`` (as listed, newest first)
    that does not lie more than ``STALE_AFTER`` ahead; ``None`` when there is none."""
    return next((d.idle_seconds for d in dispatchers if d.ahead_seconds is None), None)


def _readable_heartbeats() -> QuerySet[SagaDispatcher]:
    # Rows whose last pass can be read back, loaded so that an unreadable start does not
    # fail them: a moment out of range (stored by hand) never fails a status page.
    vendor = connections[SagaDispatcher.objects.db].vendor
    return readable_rows(SagaDispatcher.objects.filter(readable_q("last_pass_at", vendor)))


def idle_warning(idle_seconds: float | None, threshold: timedelta) -> str | None:
    """What a status says when no dispatcher has passed within ``threshold``; ``None``
    while one has. ``idle_seconds``: since the newest pass (``None``: no dispatcher
    reports)."""
    if idle_seconds is None:
        return "no dispatcher has reported"
    if idle_seconds > threshold.total_seconds():
        return f"no dispatcher has passed in {idle_seconds:.0f} s"
    return None


@dataclass(frozen=True)
class Claimer:
    """Who holds (or last held) a timer's or outbox row's claim, for the row's page.

    - ``dispatcher_id``: the row's ``claimed_by`` (``None``: claimed by nobody that reports,
      such as code calling a drain, or never claimed);
    - ``dispatcher``: its ``SagaDispatcher`` row, ``None`` when there is none (never claimed
      by a reporting process, or pruned by the purge after it went quiet, or signed off);
    - ``lease_ends``: the row's ``claimed_until`` (``None``: no live lease);
    - ``claimed``: whether that lease still holds the row at ``now``;
    - ``stale``: whether the claimer's heartbeat is older than ``STALE_AFTER``, or lies
      more than ``STALE_AFTER`` ahead (then ``ahead_seconds`` says how far), or cannot be
      read back (``None`` without a dispatcher row to judge by), and ``idle_seconds`` how
      old it is (``None`` when it cannot be read).

    A claimed row whose claimer is stale (or gone) is held by a process that died or
    hangs: its lease ends at ``lease_ends``, and the next pass then claims it again.
    """

    dispatcher_id: uuid.UUID | None
    dispatcher: SagaDispatcher | None
    lease_ends: datetime | None
    claimed: bool
    stale: bool | None
    idle_seconds: float | None
    ahead_seconds: float | None = None


def claimer_of(row: DeliveryRow, *, now: datetime | None = None) -> Claimer:
    """The claimer of ``row`` (a timer or an outbox row): one query when it names one."""
    moment = now or clock.now()
    dispatcher = None
    if row.claimed_by is not None:
        dispatcher = readable_rows(SagaDispatcher.objects.filter(pk=row.claimed_by)).first()
    idle = stale = ahead = None
    if dispatcher is not None and "last_pass_at" in unreadable_fields(dispatcher):
        stale = True
    elif dispatcher is not None and dispatcher.last_pass_at is not None:
        heartbeat = _Heartbeat.of(dispatcher.last_pass_at, moment, stale_after())
        idle, stale, ahead = heartbeat.idle_seconds, heartbeat.stale, heartbeat.ahead_seconds
    # A row loaded by readable_rows() may hold a date it could not read: no status then.
    readable = not unreadable_fields(row)
    return Claimer(
        dispatcher_id=row.claimed_by,
        dispatcher=dispatcher,
        lease_ends=row.claimed_until if readable else None,
        claimed=readable and row.status(moment) == DeliveryStatus.CLAIMED,
        stale=stale,
        idle_seconds=idle,
        ahead_seconds=ahead,
    )
