"""What the delivery machinery needs to know about one table of durable rows."""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Generic, TypeVar

from django.db.models import QuerySet, prefetch_related_objects

from bsft_saga import telemetry
from bsft_saga.correlation import SagaInScope, correlation_scope, saga_scope
from bsft_saga.db import sql
from bsft_saga.delivery.report import Outcome
from bsft_saga.events.envelope import Envelope
from bsft_saga.models import DeliveryRow, JournalKind, SagaInstance, SagaJournalEntry
from bsft_saga.querysets import DeliveryQuerySet

R = TypeVar("R", bound=DeliveryRow)


@dataclass(frozen=True)
class Retirement:
    """What becomes of rows a pass retires one way (delivered, missed or dead-lettered).

    ``stamp``: the column values written to each row, fenced on the pass's claim by the
    caller (which adds what a failure records: ``attempts``, ``last_error``); ``entries``:
    the rows' entries in their sagas' journals, to write in the same transaction.
    """

    stamp: dict[str, Any]
    entries: list[dict[str, Any]]

    def journal(self) -> None:
        """Write :attr:`entries` (one statement; none if there are none)."""
        sql.insert(SagaJournalEntry, self.entries)


@dataclass(frozen=True)
class Sorted(Generic[R]):
    """Claimed rows sorted out before delivery: those to deliver, and what became of the rest."""

    to_deliver: list[R]
    missed: int = 0
    unclaimed: int = 0
    #: Whether sorting out committed writes of its own (time passed since the claim: the
    #: pass checks which rows it still holds before delivering them).
    committed: bool = False


@contextmanager
def written_scope(correlation_id: str, saga: SagaInstance | None) -> Iterator[None]:
    """Make current the correlation id (``""``: none) and the saga (if any) a row was
    written with: what a channel's :meth:`Channel.written_with` enters."""
    in_scope = None if saga is None else SagaInScope(saga.saga_type, saga.correlation_key, saga.pk)
    with correlation_scope(correlation_id or None), saga_scope(in_scope):
        yield


class Channel(ABC, Generic[R]):
    """One table of rows that each publish an event: timers, or outbox messages.

    The machinery (claim, deliver in a batch, record failures, requeue) is the same for
    both; a channel names the table's columns and vocabulary. Every row has ``attempts``,
    ``last_error``, ``next_attempt_at``, ``dead_lettered_at``, ``claim_token`` and
    ``claimed_until``; what "pending" (still to be delivered) and "delivered" mean differs.
    """

    #: The model whose rows this channel delivers.
    model: ClassVar[type[DeliveryRow]]
    #: What a row is called in logs and messages ("timer", "outbox message").
    noun: ClassVar[str]
    #: The counter (a key of ``telemetry.COUNTERS``) a row retired with each outcome adds to.
    counters: ClassVar[Mapping[Outcome, str]]
    #: Related rows loaded with each claimed row (joined, or fetched after the claim).
    related: ClassVar[tuple[str, ...]] = ()
    #: The columns that are null while a row is pending (``pending_rows()`` as equality, for the
    #: hot path's statements in :mod:`bsft_saga.db.sql`).
    pending_where: ClassVar[Mapping[str, None]]
    #: The outcomes the table retires rows with, each with the kind of the entry a row so
    #: retired gets in its saga's journal (``None``: none of its own, what its event woke
    #: writes the entries).
    journal_kinds: ClassVar[Mapping[Outcome, JournalKind | None]]

    @abstractmethod
    def all_rows(self) -> DeliveryQuerySet[R]:
        """Every row of the table."""

    @abstractmethod
    def claimable(self, now: datetime) -> DeliveryQuerySet[R]:
        """Pending rows that are ready at ``now`` and held by no live claim, in delivery order."""

    @abstractmethod
    def pending_rows(self) -> DeliveryQuerySet[R]:
        """Rows still to be delivered (the only ones a claim can hold)."""

    @abstractmethod
    def delivered_rows(self) -> DeliveryQuerySet[R]:
        """Rows retired as delivered (a fired timer, a delivered outbox message)."""

    def retire(
        self,
        rows: Sequence[R],
        outcome: Outcome,
        now: datetime,
        *,
        reason: str = "",
        journaled: bool = False,
    ) -> Retirement:
        """What becomes of ``rows``, retired as ``outcome`` at ``now``: their stamp and their
        journal entries.

        The one place a retired row's fate is decided: the claim (a row given up), sorting
        out (a timer missed), a failed attempt at the limit (dead-lettered, with ``reason``)
        and the group commit (delivered) all ask it. Every stamp clears the lease and the
        retry and keeps the claim token (so that a pass can tell afterwards which rows it
        retired), a dead letter's also records when it was given up, and the table adds its own
        columns (:meth:`stamped`). ``journaled``: the journal tells of the rows already (a
        delivered row's event woke a step of its own saga, whose transition entry names the
        row), so they need no entry of their own. An outcome the table retires no row with
        (not in :attr:`journal_kinds`) raises.
        """
        if outcome not in self.journal_kinds:
            raise ValueError(f"no {self.noun} is retired as {outcome.value}")
        stamp: dict[str, Any] = {
            **self.stamped(outcome, now, reason=reason),
            "claimed_until": None,
            "next_attempt_at": None,
        }
        if outcome is Outcome.DEAD_LETTERED:
            stamp["dead_lettered_at"] = now
        kind = self.journal_kinds[outcome]
        if journaled or kind is None:
            return Retirement(stamp, [])
        entries = [self.journal_entry(row, kind, now) for row in rows]
        return Retirement(stamp, [entry for entry in entries if entry is not None])

    def stamped(self, outcome: Outcome, now: datetime, *, reason: str) -> dict[str, Any]:
        """The table's own columns a row retired as ``outcome`` gets (none, by default)."""
        return {}

    @abstractmethod
    def journal_entry(self, row: R, kind: JournalKind, now: datetime) -> dict[str, Any] | None:
        """``row``'s entry of ``kind`` in its saga's journal (``None``: it belongs to no saga)."""

    def count(self, outcome: Outcome, saga_type: str, n: int = 1) -> None:
        """Add ``n`` rows of ``saga_type`` retired as ``outcome`` to its counter (if any)."""
        counter = self.counters.get(outcome)
        if counter is not None:
            telemetry.count(counter, saga_type, n)

    @abstractmethod
    def envelope(self, row: R, token: Any) -> Envelope:
        """The envelope ``row`` publishes; raises if its type or payload no longer resolves."""

    def saga_of(self, row: R) -> uuid.UUID | None:
        """The saga whose row a delivery of ``row`` locks before the row's own (or ``None``)."""
        return None

    def sort_out(self, rows: list[R], token: Any, now: datetime) -> Sorted[R]:
        """Retire claimed rows that are not to be delivered (the timers' catch-up policy)."""
        return Sorted(rows)

    @abstractmethod
    def saga_type(self, row: R) -> str:
        """The saga type telemetry attributes the row to ("" for none)."""

    @abstractmethod
    def describe(self, row: R) -> str:
        """The row in a log line or a refusal: which table, which id, which saga."""

    def load(self, rows: DeliveryQuerySet[R]) -> DeliveryQuerySet[R]:
        """``rows`` with what delivering them needs loaded along."""
        return rows.select_related(*self.related) if self.related else rows

    def read(self, rows: QuerySet[R]) -> list[R]:
        """The rows of the query ``rows``, loaded for delivery (the ORM's instances, by
        default)."""
        return list(rows)

    def load_related(self, rows: list[R]) -> dict[Any, Any]:
        """Load the related rows of ``rows`` (claimed, about to be delivered); return what
        was read along for the steps they wake, by row pk (nothing, by default).

        The pass hands a row's entry to the lookup of the step its event wakes, which then
        needs no query of its own (see :mod:`bsft_saga.engine.lookup`).
        """
        prefetch_related_objects(rows, *self.related)
        return {}

    def held(self, token: Any) -> DeliveryQuerySet[R]:
        """Pending rows that still carry the claim ``token``."""
        return self.pending_rows().filter(claim_token=token)

    def where_held(self, row: R, token: Any) -> dict[str, Any]:
        """``row``, while it is pending and ``token`` holds it: a condition for ``sql.update``."""
        return {self.model._meta.pk.name: row.pk, "claim_token": token, **self.pending_where}

    def requeued(self) -> dict[str, Any]:
        """The table's own column values that make a dead-lettered row pending again."""
        return {}

    def after_requeue(self, row: R) -> None:
        """Runs in the savepoint that made ``row`` pending again (to touch what it belongs to)."""

    def requeue_refusal(self, row: R, user: Any) -> str | None:
        """Why a dead-lettered ``row`` must not be requeued at ``user``'s request (``None``:
        code or a command), or ``None`` to requeue it."""
        return None

    @contextmanager
    def written_with(self, row: R) -> Iterator[None]:
        """The correlation id and the saga ``row`` was written with, made current: what
        every log record about its delivery names, its failure's included."""
        yield

    @contextmanager
    def publishing(self, row: R) -> Iterator[None]:
        """Wraps the publication of ``row``'s envelope (e.g. a tracing span)."""
        yield
