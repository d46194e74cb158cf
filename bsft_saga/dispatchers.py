"""Which dispatchers report in, and which went quiet: the reading side of the heartbeats.

A process running passes inside :func:`bsft_saga.delivery.heartbeat.reporting` keeps a
``SagaDispatcher`` row. It is **stale** once its ``last_pass_at`` is older than
``TIMEOUTS["STALE_AFTER"]`` (three ``POLL_INTERVAL`` s, at least a minute, by default): an
idle dispatcher reports once per ``POLL_INTERVAL`` and a busy one at every pass, so a stale
one is dead, stuck, or cut off from the database. ``saga_status()``, ``GET status/``, the
admin's status panel and a claimed row's admin page read them from here.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from bsft_saga import clock
from bsft_saga.conf import saga_settings
from bsft_saga.db.datetimes import unreadable_fields
from bsft_saga.models import DeliveryRow, SagaDispatcher
from bsft_saga.querysets import DeliveryStatus

__all__ = [
    "LISTED",
    "Claimer",
    "DispatcherStatus",
    "claimer_of",
    "idle_warning",
    "listed_dispatchers",
    "stale_after",
]

#: The most dispatchers a status lists: those that passed last. A Celery pool that
#: replaces its children often leaves a row per child until the purge prunes them.
LISTED = 50


def stale_after() -> timedelta:
    """``TIMEOUTS["STALE_AFTER"]``, resolved: a dispatcher whose last pass is older is stale."""
    return saga_settings.timeouts.stale_after


@dataclass(frozen=True)
class DispatcherStatus:
    """One dispatcher in a status; ``as_dict()`` is its entry in ``dispatchers``.

    ``idle_seconds``: now minus ``last_pass_at`` (never negative: the dispatcher's host
    may run a little ahead); ``stale``: whether that is more than ``STALE_AFTER``.
    """

    id: uuid.UUID
    kind: str
    host: str
    pid: int
    started_at: datetime
    last_pass_at: datetime
    delivered: int
    claims: int
    idle_seconds: float
    stale: bool

    @classmethod
    def of(cls, row: SagaDispatcher, *, now: datetime, stale_after: timedelta) -> DispatcherStatus:
        assert row.last_pass_at is not None  # listed_dispatchers() reads passed ones only
        idle = _idle_seconds(row.last_pass_at, now)
        return cls(
            id=row.id,
            kind=row.kind,
            host=row.host,
            pid=row.pid,
            started_at=row.started_at,
            last_pass_at=row.last_pass_at,
            delivered=row.delivered,
            claims=row.claims,
            idle_seconds=idle,
            stale=idle > stale_after.total_seconds(),
        )

    def as_dict(self) -> dict[str, Any]:
        """JSON-able: the id as a string, the times in ISO 8601."""
        return {
            "id": str(self.id),
            "kind": self.kind,
            "host": self.host,
            "pid": self.pid,
            "started_at": self.started_at.isoformat(),
            "last_pass_at": self.last_pass_at.isoformat(),
            "delivered": self.delivered,
            "claims": self.claims,
            "idle_seconds": self.idle_seconds,
            "stale": self.stale,
        }


def _idle_seconds(last_pass_at: datetime, now: datetime) -> float:
    # Never negative: the dispatcher's host may run a little ahead of this one.
    return max(0.0, (now - last_pass_at).total_seconds())


def listed_dispatchers(
    *, now: datetime | None = None, threshold: timedelta | None = None
) -> tuple[DispatcherStatus, ...]:
    """The :data:`LISTED` dispatchers that passed last, newest pass first (one query, down
    the ``last_pass_at`` index); stale past ``threshold`` (default :func:`stale_after`)."""
    moment = now or clock.now()
    threshold = threshold or stale_after()
    rows = SagaDispatcher.objects.filter(last_pass_at__isnull=False).order_by("-last_pass_at")
    return tuple(
        DispatcherStatus.of(row, now=moment, stale_after=threshold) for row in rows[:LISTED]
    )


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
    - ``stale``: whether the claimer's heartbeat is older than ``STALE_AFTER`` (``None``
      without a dispatcher row to judge by), and ``idle_seconds`` how old it is.

    A claimed row whose claimer is stale (or gone) is held by a process that died or
    stalls: its lease ends at ``lease_ends``, and the next pass then claims it again.
    """

    dispatcher_id: uuid.UUID | None
    dispatcher: SagaDispatcher | None
    lease_ends: datetime | None
    claimed: bool
    stale: bool | None
    idle_seconds: float | None


def claimer_of(row: DeliveryRow, *, now: datetime | None = None) -> Claimer:
    """The claimer of ``row`` (a timer or an outbox row): one query when it names one."""
    moment = now or clock.now()
    dispatcher = None
    if row.claimed_by is not None:
        dispatcher = SagaDispatcher.objects.filter(pk=row.claimed_by).first()
    idle = stale = None
    if dispatcher is not None and dispatcher.last_pass_at is not None:
        idle = _idle_seconds(dispatcher.last_pass_at, moment)
        stale = idle > stale_after().total_seconds()
    # A row loaded by readable_rows() may hold a date it could not read: no status then.
    readable = not unreadable_fields(row)
    return Claimer(
        dispatcher_id=row.claimed_by,
        dispatcher=dispatcher,
        lease_ends=row.claimed_until if readable else None,
        claimed=readable and row.status(moment) == DeliveryStatus.CLAIMED,
        stale=stale,
        idle_seconds=idle,
    )
