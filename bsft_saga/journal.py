"""The journal of an instance: one ``SagaJournalEntry`` per transition and operator action.

Each entry is written in the commit of what it records, so the journal never tells of a
transition that rolled back, nor misses one that committed:

- a transition's entry rides with its inbox row: the engine's window writes both only if
  its version-checked advance matched (on PostgreSQL in the same statement, see
  :mod:`bsft_saga.engine.window`); a new instance's entry is inserted with it;
- a timer whose event woke no step of its saga (plain receivers sent the reminder) has a
  ``timer_fired`` entry, written with its stamp (:mod:`bsft_saga.delivery.commit`); one the
  catch-up policy discards, ``timer_missed``; a timer, or an outbox row one of its steps
  published, that is given up, ``dead_lettered`` (each in the write that retires the row);
- an operator action's entry (:func:`record_action`) is written in the action's own
  transaction, beside its audit record.

An entry holds metadata only (what happened, when, through what, by whom), never the state
or an event's payload: it is shown to anyone allowed to see sagas. It goes with its
instance when that is purged or erased.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from bsft_saga import clock
from bsft_saga.db import sql
from bsft_saga.events.envelope import Envelope
from bsft_saga.models import (
    JournalKind,
    JournalVia,
    SagaJournalEntry,
    SagaKeptEvent,
    SagaOutboxMessage,
    SagaTimeout,
)

__all__ = [
    "TIMER_FIELDS",
    "outbox_entry",
    "record_action",
    "record_timer_action",
    "timer_entry",
    "transition_entry",
    "username",
]

#: What :func:`record_timer_action` reads of a timer (for ``QuerySet.only()``).
TIMER_FIELDS = ("name", "saga", "event_type", "message_id", "correlation_id")


def transition_entry(
    saga_id: uuid.UUID,
    *,
    kind: JournalKind,
    envelope: Envelope,
    via: JournalVia,
    step_before: int | None,
    step_after: int,
    version: int,
    at: datetime,
) -> dict[str, Any]:
    """The row of a transition's entry, for the window to write with its inbox row.

    Every transition's row names the same fields, so that a pass can write the entries of a
    whole group in one statement (``sql.update_then_insert_each``).
    """
    timer = envelope.timer
    return _entry(
        saga_id,
        kind,
        via,
        at=at,
        event_type=envelope.event_type,
        message_id=envelope.message_id,
        step_before=step_before,
        step_after=step_after,
        version=version,
        timer_name=timer.name if timer is not None else "",
        correlation_id=envelope.correlation_id or "",
    )


def timer_entry(timer: SagaTimeout, kind: JournalKind, *, at: datetime) -> dict[str, Any]:
    """The entry of what became of ``timer`` in a pass (it fired without waking a step of its
    saga, the catch-up policy missed it, it was dead-lettered): its name and its event."""
    # Nothing moved the saga: no steps, no version.
    return _entry(
        timer.saga_id,
        kind,
        JournalVia.TIMER,
        at=at,
        timer_name=timer.name,
        event_type=timer.event_type,
        message_id=timer.message_id,
        correlation_id=timer.correlation_id,
    )


def outbox_entry(message: SagaOutboxMessage, kind: JournalKind, *, at: datetime) -> dict[str, Any]:
    """The entry of what became of an outbox row a step of its saga published (it was
    dead-lettered): its event."""
    assert message.saga_id is not None
    return _entry(
        message.saga_id,
        kind,
        JournalVia.OUTBOX,
        at=at,
        event_type=message.event_type,
        message_id=message.pk,
        correlation_id=message.correlation_id,
    )


def kept_entry(row: SagaKeptEvent, kind: JournalKind, *, at: datetime) -> dict[str, Any]:
    """The entry of what became of a kept event without moving its saga (it was
    dead-lettered): its event."""
    assert row.saga_id is not None
    return _entry(
        row.saga_id,
        kind,
        JournalVia.KEPT,
        at=at,
        event_type=row.event_type,
        message_id=row.message_id,
        correlation_id=row.correlation_id,
    )


def _entry(
    saga_id: uuid.UUID,
    kind: JournalKind,
    via: JournalVia,
    *,
    at: datetime,
    event_type: str = "",
    message_id: uuid.UUID | None = None,
    step_before: int | None = None,
    step_after: int | None = None,
    version: int | None = None,
    timer_name: str = "",
    user: str = "",
    correlation_id: str = "",
) -> dict[str, Any]:
    """One entry's row. Every entry names every field, so that rows of any kind can be
    written in one statement (``sql.insert``, ``sql.update_then_insert_each``)."""
    return {
        "saga": saga_id,
        "at": at,
        "kind": kind,
        "event_type": event_type,
        "message_id": message_id,
        "step_before": step_before,
        "step_after": step_after,
        "version": version,
        "via": via,
        "timer_name": timer_name,
        "user": user,
        "correlation_id": correlation_id,
    }


def record_action(
    saga_id: uuid.UUID,
    kind: JournalKind,
    *,
    user: Any = None,
    timer_name: str = "",
    event_type: str = "",
    message_id: uuid.UUID | None = None,
    step: int | None = None,
    version: int | None = None,
    correlation_id: str = "",
    at: datetime | None = None,
) -> None:
    """Write the entry of an operator action on ``saga_id`` (in the caller's transaction).

    ``user`` is the operator (``None`` from a command or code); ``step`` the instance's step,
    unchanged by the action (``step_before`` and ``step_after``); ``version`` its version
    after the action, when the action moved it on.
    """
    entry = _entry(
        saga_id,
        kind,
        JournalVia.OPERATOR,
        at=at or clock.now(),
        event_type=event_type,
        message_id=message_id,
        step_before=step,
        step_after=step,
        version=version,
        timer_name=timer_name,
        user=username(user),
        correlation_id=correlation_id,
    )
    sql.insert(SagaJournalEntry, [entry])


def record_timer_action(
    timer: SagaTimeout,
    kind: JournalKind,
    *,
    user: Any = None,
    step: int | None = None,
    version: int | None = None,
    at: datetime | None = None,
) -> None:
    """:func:`record_action` for an action on ``timer``: its name and the event it publishes
    (type, message id, correlation id)."""
    record_action(
        timer.saga_id,
        kind,
        user=user,
        timer_name=timer.name,
        event_type=timer.event_type,
        message_id=timer.message_id,
        correlation_id=timer.correlation_id,
        step=step,
        version=version,
        at=at,
    )


def username(user: Any) -> str:
    """The name an entry keeps of ``user``: its username if authenticated, else ``""``."""
    if user is None or not getattr(user, "is_authenticated", False):
        return ""
    return str(user.get_username())
