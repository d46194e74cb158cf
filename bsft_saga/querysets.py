"""Query vocabulary for saga rows. Nothing here writes.

Timers and outbox messages are delivered by one machinery (``bsft_saga.delivery``), so they
share one lifecycle, defined here once, in SQL (the queryset methods) and in Python
(:func:`timer_status` / :func:`outbox_status`, behind ``row.status()``)::

    pending ┬─ waiting ─── its time (due_at; deliver_at, else created_at) not reached yet
            ├─ ready ───── a pass may claim it now
            ├─ retrying ── an attempt failed; not tried again before next_attempt_at
            └─ claimed ─── a pass holds it (claim_token, lease until claimed_until)
    retired ─ fired | missed | canceled | dead_lettered     (timers: outcome, dispatched_at)
              delivered | dead_lettered                      (outbox: delivered_at, ...)

A pending row's status depends on the time: a lease runs out, a back-off ends. A timer is
pending while ``dispatched_at`` is null, an outbox message while neither ``delivered_at``
nor ``dead_lettered_at`` is set. The pass's own word for what happened to a row in it is
its :class:`~bsft_saga.delivery.report.Outcome`; the retired statuses are also stored, for
timers, as ``SagaTimeout.outcome``.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from django.db import connections, models
from django.db.models import Exists, F, Min, OuterRef, Q
from django.db.models.expressions import Combinable
from django.db.models.functions import Coalesce

from bsft_saga.db.mysql import StoredReadyAt, stores_ready_order

if TYPE_CHECKING:
    # Named in the string type arguments of the QuerySet bases below.
    from bsft_saga.models import (  # noqa: F401
        SagaInstance,
        SagaKeptEvent,
        SagaOutboxMessage,
        SagaTimeout,
    )

M = TypeVar("M", bound=models.Model)
Q_ = TypeVar("Q_", bound="DeliveryQuerySet[Any]")


class DeliveryStatus(models.TextChoices):
    """Where a timer or an outbox message is in its lifecycle (see the module docstring)."""

    WAITING = "waiting", "waiting"
    READY = "ready", "ready"
    RETRYING = "retrying", "waiting for a retry"
    CLAIMED = "claimed", "claimed"
    FIRED = "fired", "fired"
    MISSED = "missed", "missed"
    CANCELED = "canceled", "canceled"
    DELIVERED = "delivered", "delivered"
    DEAD_LETTERED = "dead_lettered", "dead-lettered"


PENDING_STATUSES = (
    DeliveryStatus.WAITING,
    DeliveryStatus.READY,
    DeliveryStatus.RETRYING,
    DeliveryStatus.CLAIMED,
)


def _claimed(now: datetime) -> Q:
    return Q(claimed_until__gte=now)


def _retrying(now: datetime) -> Q:
    return Q(next_attempt_at__gt=now)


class DeliveryQuerySet(models.QuerySet[M]):
    """What timers and outbox messages have in common: pending rows, claims, retries."""

    #: The columns whose first non-null value a pending row becomes ready at when it has
    #: never failed (its due time).
    ready_fields: ClassVar[tuple[str, ...]]

    def pending(self: Q_) -> Q_:
        """Rows still to be delivered (a timer not yet retired, an outbox row neither
        delivered nor dead-lettered): the only rows a claim can hold."""
        raise NotImplementedError

    def _ready_at(self) -> Combinable:
        # MariaDB and MySQL have neither partial indexes nor (MariaDB) indexes on an
        # expression: without an index in its order, a claim would read and lock every
        # ready row to sort them before its LIMIT, and concurrent claims would take turns.
        # There the ready time is a stored column with an index of its own, NULL once the
        # row is retired (migration 0004_mysql_ready_order).
        if self._stores_ready_order():
            return StoredReadyAt()
        return self._ready_expression()

    def _stores_ready_order(self) -> bool:
        return stores_ready_order(connections[self.db])

    def _with_ready_time(self: Q_) -> Q_:
        # The rows the ready order holds: the pending ones. The stored ready_at is NULL once
        # a row is retired, so there the pending condition is left out: InnoDB's planner
        # would take it to the index on dispatched_at (or delivered_at, dead_lettered_at),
        # created over every row there, and sort the pending rows before the LIMIT.
        return self if self._stores_ready_order() else self.pending()

    def _ready_expression(self) -> Combinable:
        # The expression of the partial "ready" indexes: keep the two spelled the same (one
        # flat COALESCE; a nested one would not match the index).
        return Coalesce("next_attempt_at", *self.ready_fields)

    def in_ready_order(self: Q_) -> Q_:
        """Oldest ready time first, then id (the order passes claim in)."""
        return self.alias(ready_at=self._ready_at()).order_by("ready_at", "pk")

    def first_ready_at(self) -> datetime | None:
        """When the first pending row becomes ready (due, or past its back-off); None: none."""
        ready_at = self._ready_at()
        first: datetime | None = self._with_ready_time().aggregate(first=Min(ready_at))["first"]
        return first

    def claimable(self: Q_, now: datetime) -> Q_:
        """Pending rows a pass may claim at ``now``: ready, past any back-off, held by nobody,
        in the order they became ready (read down an index in that order on every database:
        concurrent claims lock only the rows they take)."""
        return (
            self._with_ready_time()
            .in_ready_order()
            .filter(ready_at__lte=now)
            .exclude(claimed_until__gte=now)
        )

    def retrying(self: Q_, now: datetime) -> Q_:
        """Pending rows waiting out the back-off after a failed attempt."""
        return self.pending().filter(_retrying(now)).exclude(_claimed(now))

    def claimed(self: Q_, now: datetime) -> Q_:
        """Pending rows a pass holds right now (its lease has not run out)."""
        return self.pending().filter(_claimed(now))

    def dead_lettered(self: Q_) -> Q_:
        """Rows given up after ``MAX_DISPATCH_ATTEMPTS`` failed attempts."""
        return self.filter(dead_lettered_at__isnull=False)

    def waiting(self: Q_, now: datetime) -> Q_:
        """Pending rows whose time has not come yet (neither claimed nor backing off)."""
        raise NotImplementedError

    def retired_in(self: Q_, status: DeliveryStatus) -> Q_:
        """The rows retired as ``status`` (fired, missed, canceled, delivered, dead-lettered)."""
        raise NotImplementedError

    def in_status(self: Q_, status: DeliveryStatus, now: datetime) -> Q_:
        """The rows in ``status`` at ``now``: the SQL twin of :func:`timer_status` and
        :func:`outbox_status` (``tests/delivery/test_delivery_status.py`` holds the two
        together)."""
        if status == DeliveryStatus.WAITING:
            return self.waiting(now)
        if status == DeliveryStatus.READY:
            return self.claimable(now)
        if status == DeliveryStatus.RETRYING:
            return self.retrying(now)
        if status == DeliveryStatus.CLAIMED:
            return self.claimed(now)
        return self.retired_in(status)


class SagaInstanceQuerySet(models.QuerySet["SagaInstance"]):
    def active(self) -> SagaInstanceQuerySet:
        return self.filter(is_complete=False)

    def for_key(self, saga_type: str, correlation_key: str) -> SagaInstanceQuerySet:
        return self.filter(saga_type=saga_type, correlation_key=correlation_key)

    def stalled(self, since: datetime) -> SagaInstanceQuerySet:
        """Active instances that have not moved since ``since``."""
        return self.active().filter(updated_at__lt=since)

    def stuck(self, since: datetime) -> SagaInstanceQuerySet:
        """Stalled since ``since`` and without a pending timer: no timer (a deadline
        included) will ever move them; only an outside event can."""
        from bsft_saga.models import SagaTimeout

        pending = SagaTimeout.objects.pending().filter(saga=OuterRef("pk"))
        return self.stalled(since).exclude(Exists(pending))


class SagaTimeoutQuerySet(DeliveryQuerySet["SagaTimeout"]):
    ready_fields = ("due_at",)

    def pending(self) -> SagaTimeoutQuerySet:
        """Timers that have not left the pending set (``dispatched_at`` is null)."""
        return self.filter(dispatched_at__isnull=True)

    def due(self, now: datetime) -> SagaTimeoutQuerySet:
        """Pending timers whose ``due_at`` has come, whatever holds them back (a claim, a
        retry back-off): the ones that are late once ``now`` passes."""
        return self.pending().filter(due_at__lte=now)

    def waiting(self, now: datetime) -> SagaTimeoutQuerySet:
        """Pending timers that are not due yet."""
        return self.pending().filter(due_at__gt=now).exclude(_claimed(now)).exclude(_retrying(now))

    def retired_before(self, cutoff: datetime) -> SagaTimeoutQuerySet:
        """Rows that left the pending set (any outcome) before ``cutoff``."""
        return self.filter(dispatched_at__lt=cutoff)

    def retired_in(self, status: DeliveryStatus) -> SagaTimeoutQuerySet:
        if status == DeliveryStatus.DELIVERED:
            return self.none()  # a timer that published its event is "fired"
        return self.filter(outcome=status.value)


class SagaOutboxQuerySet(DeliveryQuerySet["SagaOutboxMessage"]):
    # A delayed message is due at its deliver_at; any other row once it exists.
    ready_fields = ("deliver_at", "created_at")

    def pending(self) -> SagaOutboxQuerySet:
        """Rows still to be delivered: neither delivered nor dead-lettered."""
        return self.filter(delivered_at__isnull=True, dead_lettered_at__isnull=True)

    def delivered(self) -> SagaOutboxQuerySet:
        return self.filter(delivered_at__isnull=False)

    def due(self, now: datetime) -> SagaOutboxQuerySet:
        """Pending rows whose time has come (a delayed message's ``deliver_at``, any other
        row's ``created_at``), whatever holds them back (a claim, a retry back-off): the
        due outbox rows of ``saga_status`` (``outbox_undelivered``)."""
        return self.pending().alias(due_at=outbox_due_at()).filter(due_at__lte=now)

    def waiting(self, now: datetime) -> SagaOutboxQuerySet:
        """Pending delayed messages whose ``deliver_at`` has not come yet."""
        return (
            self.pending()
            .alias(due_at=outbox_due_at())
            .filter(due_at__gt=now)
            .exclude(_claimed(now))
            .exclude(_retrying(now))
        )

    def retired_in(self, status: DeliveryStatus) -> SagaOutboxQuerySet:
        if status == DeliveryStatus.DELIVERED:
            return self.delivered()
        if status == DeliveryStatus.DEAD_LETTERED:
            return self.dead_lettered()
        return self.none()  # fired, missed, canceled: timers only


class SagaKeptEventQuerySet(DeliveryQuerySet["SagaKeptEvent"]):
    """Kept events: pending until applied (the row is deleted) or dead-lettered.

    A kept event becomes ready when its saga reaches its step (``next_attempt_at`` is set
    then); before that it waits, whatever the time.
    """

    ready_fields = ("next_attempt_at",)

    def pending(self) -> SagaKeptEventQuerySet:
        """Kept events still to be applied (not dead-lettered)."""
        return self.filter(dead_lettered_at__isnull=True)

    def _ready_expression(self) -> Combinable:
        # The column of the partial index bsft_saga_kept_ready_idx, (next_attempt_at, id).
        return F("next_attempt_at")

    def waiting(self, now: datetime) -> SagaKeptEventQuerySet:
        """Kept events whose saga has not reached their step (or has no saga yet)."""
        return self.pending().filter(next_attempt_at__isnull=True).exclude(_claimed(now))

    def without_saga(self) -> SagaKeptEventQuerySet:
        """Kept for a key whose saga had not started yet (``saga`` null)."""
        return self.filter(saga__isnull=True)

    def retired_in(self, status: DeliveryStatus) -> SagaKeptEventQuerySet:
        if status == DeliveryStatus.DEAD_LETTERED:
            return self.dead_lettered()
        return self.none()  # applied or discarded rows are deleted


def kept_status(row: SagaKeptEvent, now: datetime) -> DeliveryStatus:
    """The status of one kept event at ``now`` (the Python twin of ``in_status``)."""
    if row.dead_lettered_at is not None:
        return DeliveryStatus.DEAD_LETTERED
    if row.claimed_until is not None and row.claimed_until >= now:
        return DeliveryStatus.CLAIMED
    if row.next_attempt_at is None:
        return DeliveryStatus.WAITING
    return DeliveryStatus.RETRYING if row.next_attempt_at > now else DeliveryStatus.READY


def _pending_status(row: Any, ready_from: datetime, now: datetime) -> DeliveryStatus:
    if row.claimed_until is not None and row.claimed_until >= now:
        return DeliveryStatus.CLAIMED
    if row.next_attempt_at is not None:
        return DeliveryStatus.RETRYING if row.next_attempt_at > now else DeliveryStatus.READY
    return DeliveryStatus.READY if ready_from <= now else DeliveryStatus.WAITING


def timer_status(row: SagaTimeout, now: datetime) -> DeliveryStatus:
    """The status of one timer at ``now`` (the Python twin of ``in_status``)."""
    if row.outcome:
        return DeliveryStatus(row.outcome)
    return _pending_status(row, row.due_at, now)


def outbox_status(row: SagaOutboxMessage, now: datetime) -> DeliveryStatus:
    """The status of one outbox message at ``now`` (the Python twin of ``in_status``)."""
    if row.dead_lettered_at is not None:
        return DeliveryStatus.DEAD_LETTERED
    if row.delivered_at is not None:
        return DeliveryStatus.DELIVERED
    return _pending_status(row, row.deliver_at or row.created_at, now)


def outbox_due_at() -> Coalesce:
    """When an outbox row is due: its ``deliver_at`` (a delayed message), else its
    ``created_at``; the expression of the partial index of pending rows."""
    return Coalesce(*SagaOutboxQuerySet.ready_fields)


#: The statuses each table's rows can be in, in lifecycle order (admin filters list these).
TIMER_STATUSES = (
    *PENDING_STATUSES,
    DeliveryStatus.FIRED,
    DeliveryStatus.MISSED,
    DeliveryStatus.CANCELED,
    DeliveryStatus.DEAD_LETTERED,
)
KEPT_STATUSES = (*PENDING_STATUSES, DeliveryStatus.DEAD_LETTERED)
OUTBOX_STATUSES = (
    DeliveryStatus.WAITING,
    DeliveryStatus.READY,
    DeliveryStatus.RETRYING,
    DeliveryStatus.CLAIMED,
    DeliveryStatus.DELIVERED,
    DeliveryStatus.DEAD_LETTERED,
)
