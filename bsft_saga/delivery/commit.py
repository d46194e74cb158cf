"""Group commit: the writes of many delivered rows in one short transaction.

A pass runs each row's receivers with no transaction open and keeps what they left to
write: the windows of the steps the row's event woke (staged by the engine) and the row's
own stamp. A :class:`CommitGroup` collects those :class:`Unit` s and writes them in one
transaction, so that one WAL flush covers many rows and no lock is held while user code
runs.

The lock order is the same in every transaction that writes sagas, so that two passes, or
a pass and a publisher, never wait for each other in a circle: instances being created
first (by ``saga_type`` and key: the unique index is what they lock), then existing sagas
in ascending ``id``, each saga's row before its timer and outbox rows. A publisher's window
locks its one saga, then that saga's timers; a unit writes its saga's window, then stamps
the row. A unit whose event woke several sagas is committed in a group of its own, its
windows in that order, the stamp last.

A group is first written **at once**: one transaction and no savepoint per unit, which
saves two round trips per row. That is safe as long as no unit needs undoing: a lost
version race or a row no longer held is noticed on the unit's first statement, which then
matched nothing and wrote nothing. Anything else (a unit that failed after it wrote, a
database error) rolls the whole transaction back, and the group is written again **row by
row**, a savepoint per unit, so that each unit commits or fails on its own. No user code
runs in either transaction, so writing twice repeats nothing but statements.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic

from django.db import DatabaseError, IntegrityError, transaction

from bsft_saga import clock
from bsft_saga.db import sql
from bsft_saga.delivery.channel import Channel, R
from bsft_saga.delivery.failures import failure_reason, lost_the_connection
from bsft_saga.delivery.report import Outcome
from bsft_saga.delivery.staging import Advance, LostRace, StagedWindow

logger = logging.getLogger("bsft_saga.delivery")

LockKey = tuple[Any, ...]

#: Seconds of delivering after which a stager (a pass, ``publish_many()``) commits what it
#: has delivered: the longest a saga stays uncommitted behind the receivers of the rows
#: after it, and what a killed pass repeats.
COMMIT_INTERVAL = 0.1


class CommitInterval:
    """How long a stager's open group has been delivering: it commits once that reaches
    :data:`COMMIT_INTERVAL` (read when asked)."""

    __slots__ = ("started",)

    def __init__(self) -> None:
        #: When the group's first row began delivering (``clock.stopwatch()``); ``None``
        #: while the group is empty.
        self.started: float | None = None

    def begin(self) -> None:
        """A row of the group begins delivering: the interval starts with the first."""
        if self.started is None:
            self.started = clock.stopwatch()

    def over(self) -> bool:
        started = self.started
        return started is not None and clock.stopwatch() - started >= COMMIT_INTERVAL

    def reset(self) -> None:
        """The group was committed."""
        self.started = None


def lock_order(window: StagedWindow) -> LockKey:
    """Where ``window`` falls in a commit: creations by key, then sagas by ``id``."""
    if window.creates:
        return (0, window.saga_type, window.correlation_key)
    return (1, window.saga_id)


@dataclass
class Unit(Generic[R]):
    """One delivered row: the windows its event staged, written with the row's stamp."""

    row: R
    windows: list[StagedWindow] = field(default_factory=list)

    def lock_key(self, channel: Channel[R]) -> LockKey:
        if self.windows:
            return min(lock_order(w) for w in self.windows)
        owner = channel.saga_of(self.row)
        return (1, owner) if owner is not None else (2, str(self.row.pk))


@dataclass(frozen=True)
class Committed(Generic[R]):
    """What writing one group came to, row by row."""

    outcomes: list[tuple[R, Outcome]]
    #: Rows whose window lost a version race: deliver them again, against fresh state.
    conflicted: list[R]
    #: Rows whose writes failed for a reason of their own: to be recorded as failed attempts.
    failed: list[tuple[R, str]]


class CommitGroup(Generic[R]):
    """The units a pass delivered and has not committed yet."""

    def __init__(self, channel: Channel[R], token: uuid.UUID) -> None:
        self.channel = channel
        self.token = token
        self.units: list[Unit[R]] = []
        self._sagas: set[uuid.UUID] = set()
        self._keys: set[tuple[str, str]] = set()
        #: The row whose writes are being made (charged if they cost the connection).
        self.writing: R | None = None

    def __bool__(self) -> bool:
        return bool(self.units)

    def add(self, unit: Unit[R]) -> None:
        self.units.append(unit)
        owner = self.channel.saga_of(unit.row)
        if owner is not None:
            self._sagas.add(owner)
        for window in unit.windows:
            self._sagas.add(window.saga_id)
            self._keys.add((window.saga_type, window.correlation_key))

    @property
    def sagas(self) -> frozenset[uuid.UUID]:
        """The sagas whose rows the group writes (or stamps the rows of)."""
        return frozenset(self._sagas)

    def holds_saga(self, saga_id: uuid.UUID | None) -> bool:
        return saga_id is not None and saga_id in self._sagas

    def holds_key(self, saga_type: str, correlation_key: str) -> bool:
        return (saga_type, correlation_key) in self._keys

    def commit(self) -> Committed[R]:
        """Write every unit, in lock order, in one transaction; then start afresh.

        A unit that lost a version race, or whose row is no longer this pass's, rolls back
        alone. A lost connection escapes (with :attr:`writing` naming the unit's row).
        """
        units = sorted(self.units, key=lambda unit: unit.lock_key(self.channel))
        self.units, self._sagas, self._keys = [], set(), set()
        if not units:
            return Committed([], [], [])
        try:
            advances = self._advances(units)
            if advances is not None:
                return self._commit_together(units, advances)
            return self._commit(units, self._write_at_once)
        except _RowByRow:
            return self._commit(units, self._write)

    def _advances(self, units: list[Unit[R]]) -> list[Advance | None] | None:
        """Each unit's advance (``None``: the unit stamps its row alone), if every unit of the
        group is one advance of its own row's saga (or of none) of one shape; else ``None``."""
        advances: list[Advance | None] = []
        shape = None
        for unit in units:
            if not unit.windows:
                if self.channel.saga_of(unit.row) is not None:
                    # A timer that woke no step of its saga (its event went to plain
                    # receivers) is stamped without its saga's row. Written at once, all
                    # stamps come after all advances, so two groups could each stamp such a
                    # timer of a saga the other advances, then wait for it while ending that
                    # saga's wait (which cancels its step timers): a deadlock. Unit by unit,
                    # the stamp takes its saga's place in the lock order instead.
                    return None
                advances.append(None)
                continue
            if len(unit.windows) > 1:
                return None
            window = unit.windows[0]
            advance = window.advance()
            owner = self.channel.saga_of(unit.row)
            if advance is None or owner not in (None, window.saga_id):
                return None
            this = shape_of(advance)
            if shape not in (None, this):
                return None
            shape = this
            advances.append(advance)
        return advances

    def _commit_together(
        self, units: list[Unit[R]], advances: list[Advance | None]
    ) -> Committed[R]:
        """Write the group's advances in one statement, its stamps in another, then each
        unit's other writes; ``_RowByRow`` if a unit whose advance was written lost its row.

        The advance statement locks the sagas in ``id`` order before it updates them, and
        every stamp follows every saga's advance: each saga's row is still locked before its
        timers. A statement of several rows charges none of them if it costs the
        connection (as the group's COMMIT would not).
        """
        with transaction.atomic():
            try:
                committed = self._write_together(units, advances)
            except DatabaseError as exc:
                # Asked inside the transaction: once it has rolled back, Django has
                # reconnected, and a lost connection would pass for a failed write.
                if lost_the_connection(exc):
                    raise
                raise _RowByRow from exc
        return committed

    def _write_together(self, units: list[Unit[R]], advances: list[Advance | None]) -> Committed[R]:
        outcomes: list[tuple[R, Outcome]] = []
        conflicted: list[R] = []
        channel = self.channel
        matched = advance_each([advance for advance in advances if advance is not None])
        advanced = [
            advance is not None and advanced_saga(advance) in matched for advance in advances
        ]
        stamping = [
            unit
            for unit, advance, done in zip(units, advances, advanced, strict=True)
            if advance is None or done
        ]
        # Each row stamped here woke a step of its own saga, if it has one (``_advances``):
        # that step's transition entry tells of it.
        retirement = channel.retire(
            [unit.row for unit in stamping], Outcome.DELIVERED, clock.now(), journaled=True
        )
        held = {"claim_token": self.token, **channel.pending_where}
        stamped = sql.update_each(
            channel.model, retirement.stamp, held, [unit.row.pk for unit in stamping]
        )
        for unit, advance, done in zip(units, advances, advanced, strict=True):
            if advance is not None and not done:
                conflicted.append(unit.row)
            elif unit.row.pk not in stamped:
                if done:
                    raise _RowByRow  # its saga's advance is written: undo it
                outcomes.append((unit.row, Outcome.UNCLAIMED))
            else:
                if done:
                    self.writing = unit.row
                    unit.windows[0].write()
                outcomes.append((unit.row, Outcome.DELIVERED))
        self.writing = None
        return Committed(outcomes, conflicted, [])

    def _commit(
        self, units: list[Unit[R]], write: Callable[[Unit[R]], Outcome | str | None]
    ) -> Committed[R]:
        outcomes: list[tuple[R, Outcome]] = []
        conflicted: list[R] = []
        failed: list[tuple[R, str]] = []
        with transaction.atomic():
            for unit in units:
                self.writing = unit.row
                result = write(unit)
                if isinstance(result, Outcome):
                    outcomes.append((unit.row, result))
                elif result is None:
                    conflicted.append(unit.row)
                else:
                    failed.append((unit.row, result))
            self.writing = None
        return Committed(outcomes, conflicted, failed)

    def _write_at_once(self, unit: Unit[R]) -> Outcome | None:
        """The unit's outcome, or ``None`` if it lost a race, written without a savepoint;
        ``_RowByRow`` (the transaction rolls back) if anything it wrote needs undoing."""
        progress = _Progress()
        try:
            self._write_in_lock_order(unit.row, sorted(unit.windows, key=lock_order), progress)
        except (_NotHeld, LostRace) as exc:
            if progress.wrote:
                raise _RowByRow from exc
            return Outcome.UNCLAIMED if isinstance(exc, _NotHeld) else None
        except DatabaseError as exc:
            if lost_the_connection(exc):
                raise
            raise _RowByRow from exc
        return Outcome.DELIVERED

    def _write(self, unit: Unit[R]) -> Outcome | str | None:
        """The unit's outcome, the reason its writes failed, or ``None`` if it lost a race."""
        windows = sorted(unit.windows, key=lock_order)
        try:
            with transaction.atomic():
                self._write_in_lock_order(unit.row, windows, _Progress())
        except _NotHeld:
            return Outcome.UNCLAIMED
        except LostRace:
            return None
        except IntegrityError as exc:
            if lost_the_connection(exc):
                raise
            if any(window.lost_a_race() for window in windows):
                return None
            logger.exception("bsft_saga: writing %s failed", self.channel.describe(unit.row))
            return failure_reason(exc)
        except DatabaseError as exc:
            if lost_the_connection(exc):
                raise
            logger.exception("bsft_saga: writing %s failed", self.channel.describe(unit.row))
            return failure_reason(exc)
        return Outcome.DELIVERED

    def _write_in_lock_order(
        self, row: R, windows: list[StagedWindow], progress: _Progress
    ) -> None:
        """Each saga's row, then its timers and outbox rows; the stamp in its saga's place
        (with the row's journal entry, if it woke no step of its own saga).

        The row's stamp comes right after its own saga's row is locked (and before that
        saga's timers are written: ending a wait cancels the step's pending timers, which
        the stamp has just retired) or, if no window is its saga's, in that saga's order.
        ``progress`` says whether anything was written before a ``LostRace`` or ``_NotHeld``.
        """
        owner = self.channel.saga_of(row)
        place: LockKey = (1, owner) if owner is not None else (2, str(row.pk))
        woke_its_saga = owner is not None and any(window.saga_id == owner for window in windows)
        stamped = False
        for window in windows:
            if not stamped and lock_order(window) > place:
                self._stamp(row, journaled=woke_its_saga)
                stamped = progress.wrote = True
            window.lock()
            progress.wrote = True
            if not stamped and lock_order(window) == place:
                self._stamp(row, journaled=woke_its_saga)
                stamped = True
            window.write()
        if not stamped:
            self._stamp(row, journaled=woke_its_saga)

    def _stamp(self, row: R, *, journaled: bool) -> None:
        """Retire ``row`` as delivered, while this pass's claim still holds it (the fence),
        with its journal entry unless ``journaled``; ``_NotHeld`` if it no longer does."""
        channel = self.channel
        retirement = channel.retire([row], Outcome.DELIVERED, clock.now(), journaled=journaled)
        if not sql.update(channel.model, retirement.stamp, channel.where_held(row, self.token)):
            raise _NotHeld
        retirement.journal()


def advance_each(advances: list[Advance]) -> set[Any]:
    """Write ``advances`` (of one shape), each with its inbox row and journal entry: one
    statement on PostgreSQL, its sagas locked in ``id`` order first; return the ids of the
    sagas whose version check held."""
    if not advances:
        return set()
    first = advances[0]
    return sql.update_then_insert_each(
        first.model,
        [(advance.values, advance.where) for advance in advances],
        then=[
            (into, [advance.then[n][1] for advance in advances])
            for n, (into, _row) in enumerate(first.then)
        ],
    )


def advanced_saga(advance: Advance) -> Any:
    """The id of the saga ``advance`` writes (what :func:`advance_each` returns of it)."""
    pk = advance.model._meta.pk
    return advance.where[pk.name]


def shape_of(advance: Advance) -> tuple[Any, ...]:
    """What advances written together by :func:`advance_each` must share: the model, the
    columns set and compared, the tables written with each."""
    return (
        advance.model,
        tuple(advance.values),
        tuple(advance.where),
        tuple(into for into, _row in advance.then),
    )


class _Progress:
    """Whether a unit has written anything yet (a statement that matched a row)."""

    __slots__ = ("wrote",)

    def __init__(self) -> None:
        self.wrote = False


class _RowByRow(Exception):
    """Written at once, the group needs a unit undone: write it again, row by row."""


class _NotHeld(Exception):
    """The row was canceled, replaced or taken over since it was claimed."""
