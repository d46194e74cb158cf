"""The persistence window: the writes of one handled event, all or nothing.

It writes, in this order: the state advance with a version check (which also locks the
instance row, serialising every other writer of this saga) or the insert of a new
instance, the inbox row and the journal entry (:mod:`bsft_saga.journal`), the timer writes
and the outbox rows. Either all of them commit
or none does. Outbox delivery and telemetry are registered with ``on_commit``.

Where the window is written depends on who delivers the event, so that the hot paths pay
no more statements than they must (``tests/delivery/test_delivery_statements.py``):

- an event a pass delivers (a timer, an outbox row): the window is *staged* with that pass
  (:mod:`bsft_saga.delivery.staging`), which writes it in a savepoint of its next group
  commit, with the row's stamp: the step's bodies ran with no transaction open, and a timer's
  effect on its own saga and its stamp are one commit. On PostgreSQL the advance, its inbox
  row and its journal entry are one statement (``sql.update_then_insert``);
- a new instance outside any transaction: its writes are one statement on PostgreSQL
  (``sql.insert_together``), a ``transaction.atomic`` of their own elsewhere;
- anything else: a ``transaction.atomic`` (a savepoint inside a caller's transaction), so
  a lost race rolls back this event's writes alone and is re-applied on fresh state.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction

from bsft_saga import journal, kept, outbox, telemetry
from bsft_saga.db import sql
from bsft_saga.delivery import staging
from bsft_saga.engine.context import StepEffects
from bsft_saga.events.envelope import Envelope
from bsft_saga.models import (
    JournalKind,
    JournalVia,
    SagaInboxEntry,
    SagaInstance,
    SagaJournalEntry,
    SagaOutboxMessage,
    SagaTimeout,
)
from bsft_saga.timeouts import store as timer_store
from bsft_saga.timeouts.requests import CancelAllTimers, CancelTimer, TimerRequest


class VersionConflict(staging.LostRace):
    """Another transaction created or advanced the instance first; reload and re-apply."""


@dataclass(frozen=True)
class Transition:
    """What handling one event does to one instance."""

    saga_id: uuid.UUID
    saga_type: str
    flow_version: int  # stored on a new instance; an existing one keeps its own
    correlation_key: str
    state_type: str
    state: dict[str, Any]
    is_new: bool
    expected_version: int  # ignored when is_new
    step_index: int
    completes: bool
    ends_wait: bool  # the awaited event was handled and step-scoped timers are pending: end them
    deadline: datetime | None
    envelope: Envelope
    effects: StepEffects
    now: datetime
    kind: JournalKind = JournalKind.ADVANCED  # what the journal says the transition was
    step_before: int | None = None  # the step that handled the event (None: a new instance)
    kept_id: int | None = None  # the kept event this window applies: deleted with it
    #: The flow keeps early events: its ``next_awaiting``, by which a commit that moves the
    #: saga settles its kept rows (``kept.move_on``); ``None`` for a flow that keeps none.
    next_awaiting: kept.NextAwaiting | None = None
    after_commit: Callable[[], object] | None = None  # e.g. apply the reached step's kept events
    #: The step's W3C trace context, stored with its timers and outbox rows (``None``: none).
    trace_context: Mapping[str, str] | None = None


@dataclass(frozen=True)
class _Written:
    scheduled: int = 0
    canceled: int = 0


def commit(transition: Transition) -> None:
    """Write ``transition`` atomically, or raise ``VersionConflict`` having written nothing.

    If a pass is delivering the transition's envelope, the window is staged with it
    instead, and written (or found to have lost a race) when that pass commits.
    """
    t = transition
    stager = staging.stager_for(t.envelope)
    if stager is not None:
        stager.stage(_Staged(t, via=stager.journal_via))
        return
    via = JournalVia.KEPT if t.kept_id is not None else JournalVia.PUBLISH
    try:
        # A new saga of a flow that keeps events also takes those kept for its key: in a
        # transaction, with its creation.
        alone = t.next_awaiting is None and not transaction.get_connection().in_atomic_block
        if t.is_new and alone:
            written = _create(t, via)  # all or nothing on its own (sql.insert_together)
        else:
            with transaction.atomic():
                written = _create(t, via) if t.is_new else _advance(t, via)
    except IntegrityError:
        if _lost_a_race(t):
            raise VersionConflict from None
        raise
    transaction.on_commit(lambda: _report(t, written))


class _Staged:
    """A transition staged with the pass delivering its event (``staging.StagedWindow``).

    The pass writes it in two parts, so that its saga's row is locked before the timer the
    pass stamps and before the saga's other timers: :meth:`lock`, the version-checked
    advance and the inbox row (or the whole new instance), then :meth:`write`, the rest.
    """

    def __init__(self, transition: Transition, *, via: JournalVia | None = None) -> None:
        self.transition = transition
        self.saga_id = transition.saga_id
        self.saga_type = transition.saga_type
        self.correlation_key = transition.correlation_key
        self.creates = transition.is_new
        # Staged by a pass, unless ``via`` says otherwise: for a timer or an outbox row.
        if via is None:
            via = JournalVia.OUTBOX if transition.envelope.timer is None else JournalVia.TIMER
        self.via = via
        self._written = _Written()

    def lock(self) -> None:
        # The pass runs both parts in a savepoint it rolls back on any exception; the
        # version-checked UPDATE is the first write, so a lost race leaves nothing to undo.
        t = self.transition
        if t.is_new:
            self._written = _create(t, self.via)
        else:
            _advance_version(t, self.via)

    def advance(self) -> staging.Advance | None:
        # What lock() writes for an existing saga, for a pass writing its group's together.
        return None if self.creates else _advance_of(self.transition, self.via)

    def write(self) -> None:
        t = self.transition
        if not t.is_new:
            self._written = _advance_rest(t)
        written = self._written
        transaction.on_commit(lambda: _report(t, written))

    def lost_a_race(self) -> bool:
        return _lost_a_race(self.transition)


def create_each(windows: Sequence[staging.StagedWindow]) -> None:
    """What :meth:`~staging.StagedWindow.lock` writes for each of ``windows`` (windows staged
    here that create their instance), for all of them at once: one INSERT per table (on
    PostgreSQL one statement, while its parameters fit). All or nothing: an
    ``IntegrityError`` (a key's instance created meanwhile) writes none of them. Then
    :meth:`~staging.StagedWindow.write` each, as after :meth:`~staging.StagedWindow.lock`.
    """
    staged = [window for window in windows if isinstance(window, _Staged) and window.creates]
    assert len(staged) == len(windows), "create_each takes creating windows staged here"
    tables: dict[type[Any], list[dict[str, Any]]] = {}
    for window in staged:
        rows, window._written = _creation(window.transition, window.via)
        for model, values in rows:
            tables.setdefault(model, []).extend(values)
    sql.insert_together(list(tables.items()))
    for window in staged:
        _created(window.transition)


def _lost_a_race(t: Transition) -> bool:
    """Whether the window's IntegrityError was a concurrent write, not a bug: another
    transaction created this key's instance first, or a timer of a name this step schedules
    was requeued into the pending set meanwhile. Re-applied, the event sees either."""
    if t.is_new:
        return SagaInstance.objects.active().for_key(t.saga_type, t.correlation_key).exists()
    names = [op.name for op in t.effects.timer_operations if isinstance(op, TimerRequest)]
    return (
        bool(names)
        and SagaTimeout.objects.pending().filter(saga_id=t.saga_id, name__in=names).exists()
    )


def _create(t: Transition, via: JournalVia) -> _Written:
    """A new instance, its inbox row, journal entry, timers and outbox rows: one statement
    on PostgreSQL."""
    rows, written = _creation(t, via)
    sql.insert_together(rows)
    _created(t)
    return written


def _creation(
    t: Transition, via: JournalVia
) -> tuple[list[tuple[type[Any], list[dict[str, Any]]]], _Written]:
    """The rows of a new instance, table by table, in the order they are inserted."""
    instance = {
        "id": t.saga_id,
        "saga_type": t.saga_type,
        "correlation_key": t.correlation_key,
        "state_type": t.state_type,
        "created_at": t.now,
        "deadline": t.deadline,
        "version": 1,
        "flow_version": t.flow_version,
        **_progress(t),
    }
    timers = []
    if not t.completes:  # a completed saga writes none of its last step's timers
        timers = timer_store.rows_for_new(
            t.saga_id,
            t.effects.timer_operations,
            step_index=t.step_index,
            correlation_id=t.envelope.correlation_id,
            now=t.now,
            trace_context=t.trace_context,
        )
    rows: list[tuple[type[Any], list[dict[str, Any]]]] = [
        (SagaInstance, [instance]),
        (SagaInboxEntry, [_inbox_row(t)]),
        (SagaJournalEntry, [_journal_row(t, via, version=1)]),
        (SagaTimeout, timers),
        (SagaOutboxMessage, _outbox_rows(t)),
    ]
    return rows, _Written(scheduled=len(timers))


def _created(t: Transition) -> None:
    """What follows a new instance's rows: its outbox rows' delivery and its kept events."""
    outbox.deliver_after_commit(_delivered_after_commit(t))
    _settle_kept(t)


def _advance(t: Transition, via: JournalVia) -> _Written:
    _advance_version(t, via)
    return _advance_rest(t)


def _advance_version(t: Transition, via: JournalVia) -> None:
    # The version-checked update comes first (it also locks the row); the inbox row and
    # the journal entry only if it matched: one statement on PostgreSQL.
    advance = _advance_of(t, via)
    if not sql.update_then_insert(advance.model, advance.values, advance.where, advance.then):
        raise VersionConflict


def _advance_of(t: Transition, via: JournalVia) -> staging.Advance:
    version = t.expected_version + 1
    return staging.Advance(
        SagaInstance,
        {"version": version, **_progress(t)},
        {"id": t.saga_id, "version": t.expected_version, "is_complete": False},
        then=(
            (SagaInboxEntry, _inbox_row(t)),
            (SagaJournalEntry, _journal_row(t, via, version=version)),
        ),
    )


def _advance_rest(t: Transition) -> _Written:
    _settle_kept(t)
    if t.completes:
        # A completed saga keeps no pending timer, and writes none of its last step's.
        written = _Written(canceled=timer_store.cancel_all(t.saga_id, now=t.now))
    else:
        canceled = timer_store.cancel_step_scoped(t.saga_id, now=t.now) if t.ends_wait else 0
        written = _apply_timer_operations(t, canceled)
    _write_outbox(t)
    return written


def _settle_kept(t: Transition) -> None:
    """What the transition does to the saga's kept events: the one it applies is deleted;
    a new saga takes those kept for its key; a completion discards the rest, a move to
    another step settles them (``kept.move_on``). Then the reached step's are applied,
    after the commit (``after_commit``)."""
    if t.kept_id is not None:
        kept.forget(t.kept_id)
    if t.next_awaiting is not None:
        if t.is_new:
            kept.adopt(t.saga_id, t.saga_type, t.correlation_key, now=t.now)
        if t.completes:
            kept.discard(t.saga_id)
        elif t.is_new or t.step_index != t.step_before:
            kept.move_on(t.saga_id, t.next_awaiting, reached=t.step_index, now=t.now)
    if t.after_commit is not None:
        transaction.on_commit(t.after_commit)


def _progress(t: Transition) -> dict[str, Any]:
    return {
        "state": t.state,
        "step_index": t.step_index,
        "updated_at": t.now,
        "is_complete": t.completes,
        "completed_at": t.now if t.completes else None,
    }


def _inbox_row(t: Transition) -> dict[str, Any]:
    return {
        "saga": t.saga_id,
        "message_id": t.envelope.message_id,
        "event_type": t.envelope.event_type,
        "handled_at": t.now,
    }


def _journal_row(t: Transition, via: JournalVia, *, version: int) -> dict[str, Any]:
    return journal.transition_entry(
        t.saga_id,
        kind=t.kind,
        envelope=t.envelope,
        via=via,
        step_before=t.step_before,
        step_after=t.step_index,
        version=version,
        at=t.now,
    )


def _outbox_rows(t: Transition) -> list[dict[str, Any]]:
    return [
        outbox.row_values(
            s.envelope,
            s.payload,
            saga_id=t.saga_id,
            deliver_at=s.deliver_at,
            trace_context=t.trace_context,
        )
        for s in t.effects.outbox
    ]


def _delivered_after_commit(t: Transition) -> list[Envelope]:
    # A delayed message is the drain's once its time has come: never handed over at commit.
    return [s.envelope for s in t.effects.outbox if s.deliver_at is None]


def _write_outbox(t: Transition) -> None:
    sql.insert(SagaOutboxMessage, _outbox_rows(t))
    outbox.deliver_after_commit(_delivered_after_commit(t))


def _apply_timer_operations(t: Transition, canceled: int) -> _Written:
    scheduled = 0
    for operation in t.effects.timer_operations:
        if isinstance(operation, TimerRequest):
            timer_store.schedule(
                t.saga_id,
                operation,
                step_index=t.step_index,
                correlation_id=t.envelope.correlation_id,
                now=t.now,
                trace_context=t.trace_context,
            )
            scheduled += 1
        elif isinstance(operation, CancelTimer):
            canceled += timer_store.cancel(t.saga_id, operation.name, now=t.now)
        elif isinstance(operation, CancelAllTimers):
            canceled += timer_store.cancel_all(t.saga_id, now=t.now, keep_internal=True)
    return _Written(scheduled=scheduled, canceled=canceled)


def _report(t: Transition, written: _Written) -> None:
    if t.is_new:
        telemetry.count("started", t.saga_type)
    if t.completes:
        telemetry.count("completed", t.saga_type)
    if written.scheduled:
        telemetry.count("timeout.scheduled", t.saga_type, written.scheduled)
    if written.canceled:
        telemetry.count("timeout.canceled", t.saga_type, written.canceled)
