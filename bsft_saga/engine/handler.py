"""Handling one envelope: route it to flows, guard, run the step, commit the window.

The journey per flow that awaits the event's type: compute the key, load the active
instance (or plan a new one), step guard, inbox, run the bodies on a fresh copy of the
state, then commit the window. A ``VersionConflict`` goes back to loading, against the
fresh state, up to ``ENGINE.MAX_CONFLICT_RETRIES`` times.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync

from bsft_saga import clock, telemetry
from bsft_saga.conf import saga_settings
from bsft_saga.engine import window
from bsft_saga.engine.context import SagaContext
from bsft_saga.engine.deadlines import DeadlineExpired
from bsft_saga.events import codec
from bsft_saga.events.envelope import Envelope
from bsft_saga.events.registry import event_type_of
from bsft_saga.exceptions import SagaConcurrencyError
from bsft_saga.flows.definition import Body, FlowDefinition, StepBody
from bsft_saga.flows.registry import flow_registry
from bsft_saga.models import SagaInboxEntry, SagaInstance
from bsft_saga.timeouts.requests import DEADLINE_TIMER_NAME, TimerRequest

logger = logging.getLogger(__name__)

DEADLINE_EVENT_TYPE = event_type_of(DeadlineExpired)


def handle(envelope: Envelope) -> None:
    """Apply ``envelope`` to every flow that awaits its type."""
    if envelope.event_type == DEADLINE_EVENT_TYPE:
        _handle_deadline(envelope)
        return
    for flow in flow_registry.flows_for(envelope.event_type):
        keys: dict[str, set[int]] = {}
        for step_index, trigger in flow.routes(envelope.event_type):
            key = trigger.key_for(envelope.event, where=flow.where(step_index))
            keys.setdefault(key, set()).add(step_index)
        for key, step_indices in keys.items():
            _apply(flow, key, step_indices, envelope)


@dataclass(frozen=True)
class _Plan:
    """The instance an event is about to be applied to."""

    saga_id: uuid.UUID
    is_new: bool
    version: int
    step_index: int  # the step that handles the event
    state_json: dict[str, Any] | None
    deadline: Any


def _apply(flow: FlowDefinition, key: str, step_indices: set[int], envelope: Envelope) -> None:
    retries = saga_settings.max_conflict_retries
    for attempt in range(retries + 1):
        plan = _plan(flow, key, step_indices, envelope)
        if plan is None:
            return
        step = flow.steps[plan.step_index]
        try:
            _run_and_commit(flow, key, plan, envelope, step.bodies, advance=True)
            return
        except window.VersionConflict:
            _back_off(attempt)
        except window.StaleTimerClaim as exc:
            logger.info(
                "bsft_saga: timer %s of %s[%s] is no longer ours; event dropped",
                exc,
                flow.saga_type,
                key,
            )
            return
    raise SagaConcurrencyError(
        f"{flow.saga_type}[{key or '-'}]: {envelope.event_type} {envelope.message_id} lost the "
        f"optimistic-concurrency race {retries + 1} times; raise "
        "BSFT_SAGA['ENGINE']['MAX_CONFLICT_RETRIES'] or reduce contention on this instance"
    )


def _plan(
    flow: FlowDefinition, key: str, step_indices: set[int], envelope: Envelope
) -> _Plan | None:
    instance = SagaInstance.objects.active().for_key(flow.saga_type, key).first()
    if instance is None:
        if 0 not in step_indices:
            return None  # not a start event, and nothing awaits it
        handled_by_key = SagaInboxEntry.objects.filter(
            saga__saga_type=flow.saga_type,
            saga__correlation_key=key,
            message_id=envelope.message_id,
        )
        if handled_by_key.exists():
            return None  # a redelivered start event of an instance that already finished
        deadline = clock.now() + flow.deadline.budget if flow.deadline is not None else None
        return _Plan(uuid.uuid4(), True, 0, 0, None, deadline)
    if instance.step_index not in step_indices:
        return None  # step guard: the current step does not await this event
    if SagaInboxEntry.objects.filter(saga=instance, message_id=envelope.message_id).exists():
        return None
    return _Plan(
        instance.pk, False, instance.version, instance.step_index, instance.state, instance.deadline
    )


def _run_and_commit(
    flow: FlowDefinition,
    key: str,
    plan: _Plan,
    envelope: Envelope,
    bodies: tuple[StepBody, ...],
    *,
    advance: bool,
) -> None:
    now = clock.now()
    state = (
        flow.new_state()
        if plan.state_json is None
        else codec.decode(flow.state_class, plan.state_json)
    )
    ctx: SagaContext[Any] = SagaContext(
        state=state,
        saga_id=plan.saga_id,
        saga_type=flow.saga_type,
        correlation_key=key or None,
        envelope=envelope,
        now=now,
        deadline=plan.deadline,
    )
    if plan.is_new and flow.deadline is not None and plan.deadline is not None:
        ctx.effects.timer_operations.append(
            TimerRequest(
                name=DEADLINE_TIMER_NAME,
                due_at=plan.deadline,
                event_type=DEADLINE_EVENT_TYPE,
                payload=codec.encode(DeadlineExpired(saga_id=str(plan.saga_id))),
                calendar_key="",
                scope="saga",
            )
        )
    with telemetry.step_span(
        flow.saga_type, step_index=plan.step_index, event_type=envelope.event_type
    ):
        for body in bodies:
            _run_body(body, ctx, envelope.event)
    step_index = plan.step_index + 1 if advance else plan.step_index
    completes = ctx.effects.completed or (
        advance and flow.auto_complete and step_index >= len(flow.steps)
    )
    window.commit(
        window.Transition(
            saga_id=plan.saga_id,
            saga_type=flow.saga_type,
            correlation_key=key,
            state_type=flow.state_type,
            state=codec.encode(ctx.state),
            is_new=plan.is_new,
            expected_version=plan.version,
            step_index=step_index,
            completes=completes,
            ends_wait=advance and not plan.is_new,
            deadline=plan.deadline,
            envelope=envelope,
            effects=ctx.effects,
            now=now,
        )
    )


def _run_body(body: StepBody, ctx: SagaContext[Any], event: Any) -> None:
    if body.guard is not None:
        holds = bool(_call(body.guard, ctx, event))
        if holds == body.negate:
            return
    _call(body.run, ctx, event)


def _call(fn: Body, ctx: SagaContext[Any], event: Any) -> Any:
    result = fn(ctx, event)
    if hasattr(result, "__await__"):
        # An ``async def`` body: run it to completion here; publish() is synchronous.
        async def _await() -> Any:
            return await result

        return async_to_sync(_await)()
    return result


def _back_off(attempt: int) -> None:
    # Spread the re-reads of contending writers; real sleep, not the (possibly frozen) clock.
    time.sleep(random.uniform(0, min(0.05, 0.002 * (attempt + 1))))


def _handle_deadline(envelope: Envelope) -> None:
    """Run ``on_expired`` of the instance the deadline timer belongs to, at any step."""
    event = envelope.event
    assert isinstance(event, DeadlineExpired)
    retries = saga_settings.max_conflict_retries
    for attempt in range(retries + 1):
        instance = SagaInstance.objects.active().filter(pk=uuid.UUID(event.saga_id)).first()
        if instance is None:
            return
        try:
            flow = flow_registry.get(instance.saga_type)
        except LookupError:
            logger.warning("bsft_saga: deadline of %s, whose flow is not registered", instance)
            return
        if flow.deadline is None:
            return
        if SagaInboxEntry.objects.filter(saga=instance, message_id=envelope.message_id).exists():
            return
        plan = _Plan(
            instance.pk,
            False,
            instance.version,
            instance.step_index,
            instance.state,
            instance.deadline,
        )
        try:
            _run_and_commit(
                flow,
                instance.correlation_key,
                plan,
                envelope,
                (StepBody(run=flow.deadline.on_expired),),
                advance=False,
            )
            return
        except window.VersionConflict:
            _back_off(attempt)
        except window.StaleTimerClaim:
            return
    raise SagaConcurrencyError(
        f"{event.saga_id}: deadline lost the concurrency race {retries + 1} times"
    )
