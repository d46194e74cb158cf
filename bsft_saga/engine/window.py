"""The persistence window: one ``transaction.atomic`` per handled event.

It writes, in this order: the state advance with a version check (which also locks the
instance row, serialising every other writer of this saga), the stamp of the timer that
woke the step, the inbox row, the timer writes and the outbox rows. Either all of them
commit or none does. Outbox delivery and telemetry are registered with ``on_commit``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction

from bsft_saga import outbox, telemetry
from bsft_saga.engine.context import StepEffects
from bsft_saga.events.envelope import Envelope
from bsft_saga.models import SagaInboxEntry, SagaInstance, SagaOutboxMessage
from bsft_saga.timeouts import store as timer_store
from bsft_saga.timeouts.requests import CancelAllTimers, CancelTimer, TimerRequest


class VersionConflict(Exception):
    """Another transaction created or advanced the instance first; reload and re-apply."""


class StaleTimerClaim(Exception):
    """The timer that woke this step is no longer ours to fire (cancelled or taken over)."""


@dataclass(frozen=True)
class Transition:
    """What handling one event does to one instance."""

    saga_id: uuid.UUID
    saga_type: str
    correlation_key: str
    state_type: str
    state: dict[str, Any]
    flow_version: int  # stored on a new instance; an existing one keeps its own
    is_new: bool
    expected_version: int  # ignored when is_new
    step_index: int
    completes: bool
    ends_wait: bool  # the next awaited event was handled: step-scoped timers end
    deadline: datetime | None
    envelope: Envelope
    effects: StepEffects
    now: datetime


def commit(transition: Transition) -> None:
    """Write ``transition`` atomically; ``VersionConflict`` / ``StaleTimerClaim`` roll it back."""
    t = transition
    canceled = scheduled = 0
    with transaction.atomic():
        _write_instance(t)
        origin = t.envelope.timer
        if (
            origin is not None
            and origin.saga_id == t.saga_id
            and not timer_store.stamp_fired(origin, now=t.now)
        ):
            raise StaleTimerClaim(origin.name)
        SagaInboxEntry.objects.create(
            saga_id=t.saga_id,
            message_id=t.envelope.message_id,
            event_type=t.envelope.event_type,
            handled_at=t.now,
        )
        if t.completes:
            # A completed saga keeps no pending timer, and writes none of its last step's.
            canceled = timer_store.cancel_all(t.saga_id, now=t.now)
        else:
            if t.ends_wait:
                canceled += timer_store.cancel_step_scoped(t.saga_id, now=t.now)
            c, scheduled = _apply_timer_operations(t)
            canceled += c
        staged = t.effects.outbox
        SagaOutboxMessage.objects.bulk_create(
            [outbox.new_row(s.envelope, s.payload, saga_id=t.saga_id) for s in staged]
        )
        outbox.deliver_after_commit([s.envelope for s in staged])
        transaction.on_commit(lambda: _report(t, canceled=canceled, scheduled=scheduled))


def _write_instance(t: Transition) -> None:
    fields = {
        "state": t.state,
        "step_index": t.step_index,
        "updated_at": t.now,
        "is_complete": t.completes,
        "completed_at": t.now if t.completes else None,
    }
    if t.is_new:
        try:
            with transaction.atomic():
                SagaInstance.objects.create(
                    id=t.saga_id,
                    saga_type=t.saga_type,
                    correlation_key=t.correlation_key,
                    state_type=t.state_type,
                    created_at=t.now,
                    deadline=t.deadline,
                    version=1,
                    flow_version=t.flow_version,
                    **fields,
                )
        except IntegrityError:
            if SagaInstance.objects.active().for_key(t.saga_type, t.correlation_key).exists():
                raise VersionConflict from None
            raise
        return
    updated = SagaInstance.objects.filter(
        pk=t.saga_id, version=t.expected_version, is_complete=False
    ).update(version=t.expected_version + 1, **fields)
    if not updated:
        raise VersionConflict


def _apply_timer_operations(t: Transition) -> tuple[int, int]:
    canceled = scheduled = 0
    for operation in t.effects.timer_operations:
        if isinstance(operation, TimerRequest):
            timer_store.schedule(
                t.saga_id,
                operation,
                step_index=t.step_index,
                correlation_id=t.envelope.correlation_id,
                now=t.now,
            )
            scheduled += 1
        elif isinstance(operation, CancelTimer):
            canceled += timer_store.cancel(t.saga_id, operation.name, now=t.now)
        elif isinstance(operation, CancelAllTimers):
            canceled += timer_store.cancel_all(t.saga_id, now=t.now, keep_internal=True)
    return canceled, scheduled


def _report(t: Transition, *, canceled: int, scheduled: int) -> None:
    if t.is_new:
        telemetry.count("started", t.saga_type)
    if t.completes:
        telemetry.count("completed", t.saga_type)
    if scheduled:
        telemetry.count("timeout.scheduled", t.saga_type, scheduled)
    if canceled:
        telemetry.count("timeout.canceled", t.saga_type, canceled)
