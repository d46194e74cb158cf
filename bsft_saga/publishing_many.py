"""``publish_many()``: publish many events at once, their steps' writes committed in groups;
``apublish_many()``: the same from async code.

Each event is handled as ``publish()`` handles it (the same lookup, step guard, inbox,
bodies, signal), but its window is not written on its own: it is *staged* here, as a pass
stages the windows of the steps its rows wake (:mod:`bsft_saga.delivery.staging`), and the
windows of up to ``GROUP_SIZE`` events are written together in one short transaction (sooner,
once the group's steps have run for a commit interval, as a pass commits: a saga is never
left uncommitted behind the slow steps of the events after it for longer). The
lookups of a group are read before any of its steps runs (``lookup.prefetch``), and the
new instances of a group, with their inbox rows, journal entries, timers and outbox rows,
are one INSERT per table (``window.create_each``), so that a group costs a bounded number
of statements however many sagas it starts.
"""

from __future__ import annotations

import contextlib
import enum
import itertools
import uuid
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from asgiref.sync import sync_to_async
from django.db import DatabaseError, IntegrityError, connection, transaction

from bsft_saga import clock
from bsft_saga.conf import saga_settings
from bsft_saga.correlation import get_correlation_id, new_correlation_id
from bsft_saga.db.datetimes import storable
from bsft_saga.delivery.commit import (
    CommitInterval,
    advance_each,
    advanced_saga,
    lock_order,
    shape_of,
)
from bsft_saga.delivery.failures import lost_the_connection
from bsft_saga.delivery.staging import LostRace, StagedWindow, delivering
from bsft_saga.engine import handler, lookup, window
from bsft_saga.events import payloads
from bsft_saga.events.envelope import Envelope
from bsft_saga.events.registry import check_publishable, event_class, event_type_of
from bsft_saga.events.sending import send_envelope
from bsft_saga.exceptions import SagaConcurrencyError
from bsft_saga.models import JournalVia
from bsft_saga.publishing import as_uuid, check_correlation_id

#: How many events' windows one group commit writes at most.
GROUP_SIZE = 100

#: The reason of an event that no installed flow awaits.
NO_FLOW = "no_flow"


class PublishOutcome(enum.StrEnum):
    """What became of one event of ``publish_many()``.

    ``STARTED``: it started a saga (of at least one flow that awaits it); ``APPLIED``: an
    existing saga took it (a step, a ``meanwhile``); ``KEPT``: kept for a later step of its
    saga (``keep_early``); ``IGNORED``: no saga took it, ``Published.reason`` says why;
    ``FAILED``: a step or another receiver raised, or its writes failed, and it wrote
    nothing: ``Published.error`` holds the exception.
    """

    STARTED = "started"
    APPLIED = "applied"
    KEPT = "kept"
    IGNORED = "ignored"
    FAILED = "failed"


@dataclass(frozen=True)
class Published:
    """What ``publish_many()`` did with one event: its envelope and its outcome.

    ``saga_ids``: the sagas a ``STARTED`` or ``APPLIED`` event was applied to. ``reason``:
    why an ``IGNORED`` event was, the reason ``bsft.saga.event.ignored`` counts
    (``duplicate``: the saga handled its message id already; ``not_awaited``: its saga is
    at a step that does not await it; ``no_instance``: no saga of its key runs;
    ``kept_limit``; ``no_flow``: no installed flow awaits its type). ``error``: the
    exception of a ``FAILED`` one, which wrote nothing.
    """

    envelope: Envelope
    outcome: PublishOutcome
    saga_ids: tuple[uuid.UUID, ...] = ()
    reason: str = ""
    error: BaseException | None = None


def publish_many(
    events: Iterable[Any],
    *,
    correlation_id: str | None = None,
    deadline: datetime | None = None,
    message_ids: Sequence[uuid.UUID | str | None] | None = None,
) -> list[Published]:
    """Publish ``events`` (``@event`` dataclasses) in their order, as many ``publish()``
    calls would, and return what became of each, in the same order.

    The guarantees are ``publish()``'s: each event is applied at most once per saga and
    message id (the inbox: a message id a saga handled already, in an earlier call or
    earlier in this one, is ``IGNORED`` as ``duplicate``); each step runs with no
    transaction open; every signal, journal entry, timer, outbox row and trace context of
    ``publish()`` is written. An event for a key that an earlier event of the call used
    sees that event's saga, exactly as the second of two ``publish()`` calls. What differs
    is how it is written: the windows of up to ``GROUP_SIZE`` events are committed together,
    in one short transaction and a bounded number of statements (a group whose steps have
    run for 0.1 s commits sooner, as a timer pass does, so that slow steps never hold the
    sagas before them uncommitted for longer); one that failed to write
    is written again on its own, and one that lost a race to a concurrent writer is applied
    again against fresh state (its steps run again), before the events after it.

    An event whose step (or another receiver of ``event_published``) raises is ``FAILED``
    with that exception and writes nothing; the others commit. A lost database connection,
    ``KeyboardInterrupt`` and ``SystemExit`` escape, the groups committed before them
    staying committed.

    ``correlation_id`` and ``deadline`` are each event's, as for ``publish()`` (with no
    correlation id, given or ambient, each event gets a fresh one); ``message_ids``, if
    given, holds one per event (``None``: a fresh one), so that an import run twice
    applies nothing twice. Every event is checked first, and a non-event, an event type
    that is not registered or is bsft_saga's own, an unencodable or too large payload, or
    a message id or correlation id that cannot be stored raises (``TypeError`` or
    ``ValueError``, naming the event's position) before anything is written.

    Inside a caller's transaction each event is written (in a savepoint) right after its
    steps ran, as ``publish()`` would, and the steps run inside that transaction.
    """
    envelopes = _envelopes(list(events), correlation_id, deadline, message_ids)
    return _Publishing(envelopes).run()


async def apublish_many(events: Iterable[Any], **kwargs: Any) -> list[Published]:
    """``publish_many(events, **kwargs)`` for async code, as ``apublish`` is ``publish``'s:
    run in Django's thread-sensitive executor, each group committing on its own."""
    published: list[Published] = await sync_to_async(publish_many, thread_sensitive=True)(
        list(events), **kwargs
    )
    return published


def _envelopes(
    events: list[Any],
    correlation_id: str | None,
    deadline: datetime | None,
    message_ids: Sequence[uuid.UUID | str | None] | None,
) -> list[Envelope]:
    """An envelope for each event, or the first problem of any, naming its position."""
    if message_ids is not None and len(message_ids) != len(events):
        raise ValueError(
            f"publish_many: {len(events)} events but {len(message_ids)} message ids; "
            "give one per event (None for a fresh one)"
        )
    if deadline is not None:
        storable(deadline, field="deadline", where="publish_many")
    if not correlation_id:
        correlation_id = get_correlation_id()
    now = clock.now()
    envelopes = []
    for position, event in enumerate(events):
        where = f"publish_many: events[{position}]"
        if isinstance(event, type):
            raise TypeError(f"{where} is the class {event.__name__}, not an event")
        try:
            event_type = event_type_of(event)
            if event_class(event_type) is not type(event):
                raise TypeError(f"{event_type!r} is registered to another class")
            check_publishable(event_type, where)
            payloads.encode_event(event, event_type)  # fail now, before anything is written
            if correlation_id:
                check_correlation_id(event_type, correlation_id)
            given = message_ids[position] if message_ids is not None else None
            message_id = as_uuid(given, where) if given is not None else uuid.uuid4()
        except (LookupError, TypeError, ValueError) as exc:
            kind = TypeError if isinstance(exc, TypeError | LookupError) else ValueError
            raise kind(f"{where}: {exc}") from exc
        envelopes.append(
            Envelope(
                message_id=message_id,
                event=event,
                event_type=event_type,
                correlation_id=correlation_id or new_correlation_id(),
                causation_id=None,
                deadline=deadline,
                published_at=now,
            )
        )
    return envelopes


@dataclass
class _Unit:
    """One event of the call: the windows its steps staged, and what became of it."""

    index: int
    windows: list[StagedWindow] = field(default_factory=list)
    handled: list[handler.Handled] = field(default_factory=list)

    def lock_key(self) -> tuple[Any, ...]:
        return min(lock_order(window) for window in self.windows)


class _Publishing:
    """Publishes one call's envelopes; offers the engine a place to stage their windows
    (``staging.Stager``)."""

    #: How the journal says the events arrived (``window.commit``): published.
    journal_via = JournalVia.PUBLISH

    def __init__(self, envelopes: list[Envelope]) -> None:
        self.envelopes = envelopes
        self.results: list[Published | None] = [None] * len(envelopes)
        self.group: list[_Unit] = []
        self.interval = CommitInterval()
        self.group_keys: set[tuple[str, str]] = set()  # the (saga_type, key)s it writes
        self.unit: _Unit | None = None  # the event whose steps are running
        # Inside a caller's transaction: each event in a savepoint, committed right after
        # it, so that a group's commit never falls inside another event's savepoint.
        self.nested = connection.in_atomic_block
        self.prefetched: dict[int, lookup.Answers] = {}
        self.again: list[int] = []  # events whose windows lost a race: applied next
        self.conflicts: dict[int, int] = {}

    def run(self) -> list[Published]:
        queue = deque(range(len(self.envelopes)))
        while queue:
            index = queue.popleft()
            if index not in self.prefetched and self.results[index] is None:
                self._prefetch([index, *itertools.islice(queue, GROUP_SIZE - 1)])
            self._publish(index)
            if len(self.group) >= GROUP_SIZE or self.nested or not queue or self.interval.over():
                self._commit()
            queue.extendleft(reversed(self.again))
            self.again = []
        results = [result for result in self.results if result is not None]
        assert len(results) == len(self.envelopes)
        return results

    def _prefetch(self, indices: list[int]) -> None:
        """Read the lookups of the next events, the first of them ``indices[0]``."""
        indices = [index for index in indices if index not in self.prefetched]
        questions: list[lookup.Question] = []
        for n, index in enumerate(indices):
            envelope = self.envelopes[index]
            try:
                asked = handler.lookups(envelope)
            except Exception:
                continue  # its key selector raises: the event fails when it is handled
            questions += [(n, envelope.message_id, *question) for question in asked]
        answers = lookup.prefetch(questions, len(indices))
        self.prefetched.update(zip(indices, answers, strict=True))

    def _publish(self, index: int) -> None:
        envelope = self.envelopes[index]
        unit = _Unit(index)
        self.interval.begin()
        self.unit = unit
        try:
            with (
                delivering(envelope.message_id, self, self.prefetched.pop(index, None)),
                handler.observing(envelope.message_id) as handled,
                transaction.atomic() if self.nested else contextlib.nullcontext(),
            ):
                send_envelope(envelope)
        except Exception as exc:
            if lost_the_connection(exc):
                raise
            self._done(unit, error=exc)
            return
        finally:
            self.unit = None
        unit.handled = handled
        if not unit.windows:
            self._done(unit)
        elif len(unit.windows) > 1:
            # It woke several sagas: committed alone, its windows in lock order.
            self._commit()
            self._add(unit)
            self._commit()
        else:
            self._add(unit)

    def _add(self, unit: _Unit) -> None:
        self.group.append(unit)
        self.group_keys.update((w.saga_type, w.correlation_key) for w in unit.windows)

    def _done(self, unit: _Unit, *, error: BaseException | None = None) -> None:
        envelope = self.envelopes[unit.index]
        self.results[unit.index] = _result(envelope, unit.handled, error)

    # -- what the engine's receiver calls (staging.Stager) -------------------------------

    def stage(self, staged: StagedWindow) -> None:
        if self.unit is None:
            raise RuntimeError("a window was staged while no event was being published")
        self.unit.windows.append(staged)

    def make_room(self, saga_type: str, correlation_key: str) -> bool:
        held = (saga_type, correlation_key) in self.group_keys
        if held:
            self._commit()
        return held

    # -- committing ----------------------------------------------------------------------

    def _commit(self) -> None:
        units = sorted(self.group, key=_Unit.lock_key)
        self.group, self.group_keys = [], set()
        self.interval.reset()
        if not units:
            return
        # What runs after the commit (the kept events of a step reached, outbox rows) is
        # applied as after any publish: neither staged with, nor told of as, the event being
        # published when a commit makes room for it (a kept event may have its message id).
        elsewhere = uuid.uuid4()
        with delivering(elsewhere, self), handler.observing(elsewhere):
            try:
                conflicted, failed = self._write_at_once(units)
            except _OneByOne:
                conflicted, failed = self._write_one_by_one(units)
        keys = {(w.saga_type, w.correlation_key) for unit in units for w in unit.windows}
        for prefetched in self.prefetched.values():
            prefetched.forget(keys)  # outdated by this commit
        for unit in units:
            if unit.index in failed:
                self._done(unit, error=failed[unit.index])
            elif unit.index in conflicted:
                self._apply_again(unit)
            else:
                self._done(unit)

    def _apply_again(self, unit: _Unit) -> None:
        """Publish ``unit``'s event again after its window lost a race (before the events
        after it), up to the engine's retry limit."""
        conflicts = self.conflicts.get(unit.index, 0) + 1
        if conflicts > saga_settings.engine.max_conflict_retries:
            envelope = self.envelopes[unit.index]
            error = SagaConcurrencyError(
                f"{envelope.event_type} {envelope.message_id} lost the optimistic-concurrency "
                f"race {conflicts} times; raise BSFT_SAGA['ENGINE']['MAX_CONFLICT_RETRIES'] "
                "or reduce contention on this instance"
            )
            self._done(unit, error=error)
            return
        self.conflicts[unit.index] = conflicts
        self.again = sorted([*self.again, unit.index])

    def _write_at_once(self, units: list[_Unit]) -> tuple[set[int], dict[int, BaseException]]:
        """Write the group in one transaction: its new instances in one INSERT per table,
        the version-checked advances of its existing sagas in one statement (on
        PostgreSQL), then each window's other writes. Return the events whose advance lost
        a race; ``_OneByOne`` (rolled back) if the group cannot be written so."""
        if any(len(unit.windows) > 1 for unit in units):
            raise _OneByOne  # an event that woke several sagas: its windows in lock order
        creating = [unit.windows[0] for unit in units if unit.windows[0].creates]
        advancing = [unit for unit in units if not unit.windows[0].creates]
        advances = [unit.windows[0].advance() for unit in advancing]
        written = [advance for advance in advances if advance is not None]
        if len(written) < len(advances) or len({shape_of(a) for a in written}) > 1:
            raise _OneByOne
        with transaction.atomic():
            try:
                if creating:
                    # A savepoint of its own: elsewhere than on PostgreSQL its INSERTs run in
                    # an atomic block without one, which a failed INSERT marks for rollback,
                    # and a lost race would look like a lost connection.
                    with transaction.atomic():
                        window.create_each(creating)
                matched = advance_each(written)
                conflicted = {
                    unit.index
                    for unit, advance in zip(advancing, written, strict=True)
                    if advanced_saga(advance) not in matched
                }
                for unit in units:
                    if unit.index not in conflicted:
                        unit.windows[0].write()
            except DatabaseError as exc:
                # Asked inside the transaction: once it has rolled back, Django has
                # reconnected, and a lost connection would pass for a failed write.
                if lost_the_connection(exc):
                    raise
                raise _OneByOne from exc
        return conflicted, {}

    def _write_one_by_one(self, units: list[_Unit]) -> tuple[set[int], dict[int, BaseException]]:
        """Write the group in one transaction, a savepoint per event, so that each commits
        or fails on its own."""
        conflicted: set[int] = set()
        failed: dict[int, BaseException] = {}
        with transaction.atomic():
            for unit in units:
                windows = sorted(unit.windows, key=lock_order)
                try:
                    with transaction.atomic():
                        for staged in windows:
                            staged.lock()
                            staged.write()
                except LostRace:
                    conflicted.add(unit.index)
                except DatabaseError as exc:
                    if lost_the_connection(exc):
                        raise
                    if isinstance(exc, IntegrityError) and any(w.lost_a_race() for w in windows):
                        conflicted.add(unit.index)
                    else:
                        failed[unit.index] = exc
        return conflicted, failed


def _result(
    envelope: Envelope, handled: list[handler.Handled], error: BaseException | None
) -> Published:
    """What became of an event, from what each flow that awaits its type did with it."""
    if error is not None:
        return Published(envelope, PublishOutcome.FAILED, error=error)
    applied = tuple(
        h.saga_id for h in handled if h.outcome is handler.FlowOutcome.APPLIED and h.saga_id
    )
    if any(h.starts for h in handled if h.outcome is handler.FlowOutcome.APPLIED):
        return Published(envelope, PublishOutcome.STARTED, saga_ids=applied)
    if applied:
        return Published(envelope, PublishOutcome.APPLIED, saga_ids=applied)
    if any(h.outcome is handler.FlowOutcome.KEPT for h in handled):
        return Published(envelope, PublishOutcome.KEPT)
    reason = next((h.reason for h in handled if h.outcome is handler.FlowOutcome.IGNORED), NO_FLOW)
    return Published(envelope, PublishOutcome.IGNORED, reason=reason)


class _OneByOne(Exception):
    """Written at once, the group needs an event undone: write it again, one by one."""
