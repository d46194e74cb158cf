"""Handling one envelope: route it to flows, guard, run the step, commit the window.

The journey per flow that awaits the event's type: compute the key, load the active
instance (or plan a new one), step guard, inbox, run the bodies on a fresh copy of the
state, then commit the window. A ``VersionConflict`` goes back to loading, against the
fresh state, up to ``ENGINE.MAX_CONFLICT_RETRIES`` times.
"""

from __future__ import annotations

import enum
import logging
import random
import time
import uuid
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from datetime import datetime
from functools import partial
from typing import Any

from asgiref.sync import async_to_sync
from django.db import transaction

from bsft_saga import clock, kept, telemetry
from bsft_saga.conf import saga_settings
from bsft_saga.correlation import SagaInScope, correlation_scope, saga_scope
from bsft_saga.db.datetimes import storable
from bsft_saga.delivery import staging
from bsft_saga.delivery.failures import failure_reason, lost_the_connection, record_failure
from bsft_saga.delivery.report import Outcome
from bsft_saga.engine import lookup, window
from bsft_saga.engine.context import SagaContext
from bsft_saga.engine.deadlines import DeadlineExpired
from bsft_saga.events import codec, nesting
from bsft_saga.events.envelope import Envelope
from bsft_saga.events.registry import event_type_of
from bsft_saga.exceptions import SagaConcurrencyError
from bsft_saga.flows import activation
from bsft_saga.flows.definition import Body, FlowDefinition, StepBody
from bsft_saga.flows.registry import flow_registry
from bsft_saga.models import JournalKind, SagaInboxEntry, SagaInstance, SagaKeptEvent
from bsft_saga.timeouts.requests import DEADLINE_TIMER_NAME, TimerRequest

logger = logging.getLogger(__name__)

DEADLINE_EVENT_TYPE = event_type_of(DeadlineExpired)


def handle(envelope: Envelope) -> None:
    """Apply ``envelope`` to every flow that awaits its type."""
    if envelope.event_type == DEADLINE_EVENT_TYPE:
        _handle_deadline(envelope)
        return
    for flow in flow_registry.flows_for(envelope.event_type):
        for key, (step_indices, meanwhile) in _keys(flow, envelope).items():
            _apply(
                flow, envelope, partial(_plan_step, flow, key, step_indices, envelope, meanwhile)
            )


def lookups(envelope: Envelope) -> list[tuple[str, str, bool]]:
    """The questions :func:`handle` asks the lookup for ``envelope``, as ``(saga_type,
    correlation_key, or_finished)`` (``lookup.instance_for``), to read them in advance.

    Runs the flows' key selectors (which must not depend on anything but the event); the
    deadline event and a timer's event ask nothing here.
    """
    if envelope.event_type == DEADLINE_EVENT_TYPE or envelope.timer is not None:
        return []
    return [
        (flow.saga_type, key, 0 in step_indices and flow_registry.is_current(flow))
        for flow in flow_registry.flows_for(envelope.event_type)
        for key, (step_indices, _meanwhile) in _keys(flow, envelope).items()
    ]


def _keys(flow: FlowDefinition, envelope: Envelope) -> dict[str, tuple[set[int], set[int]]]:
    """The keys of ``flow`` the event is for: the steps awaiting it and those whose
    ``meanwhile`` takes it, by key."""
    keys: dict[str, tuple[set[int], set[int]]] = {}
    for step_index, trigger in flow.routes(envelope.event_type):
        key = trigger.key_for(envelope.event, where=partial(flow.where, step_index))
        keys.setdefault(key, (set(), set()))[0].add(step_index)
    for step_index, trigger in flow.meanwhile_routes(envelope.event_type):
        key = trigger.key_for(envelope.event, where=partial(flow.where, step_index))
        keys.setdefault(key, (set(), set()))[1].add(step_index)
    return keys


class FlowOutcome(enum.Enum):
    """What became of an envelope in one flow that awaits its type."""

    APPLIED = "applied"  # a saga took it: a step, a ``meanwhile``
    KEPT = "kept"  # kept for a later step of its saga
    IGNORED = "ignored"  # no saga took it: ``Handled.reason`` says why


@dataclass(frozen=True)
class Handled:
    """What handling an envelope did for one flow that awaits its type (:func:`observing`)."""

    saga_type: str
    outcome: FlowOutcome
    #: Why it was ignored: the reason ``bsft.saga.event.ignored`` counts it under.
    reason: str = ""
    saga_id: uuid.UUID | None = None  # the saga it was applied to
    starts: bool = False  # the saga it was applied to is new


_observing: ContextVar[tuple[uuid.UUID, list[Handled]] | None] = ContextVar(
    "bsft_saga_observing", default=None
)


@contextmanager
def observing(message_id: uuid.UUID) -> Iterator[list[Handled]]:
    """While the envelope ``message_id`` is handled, collect what became of it, flow by
    flow (a flow's windows may be staged, and written later)."""
    handled: list[Handled] = []
    token = _observing.set((message_id, handled))
    try:
        yield handled
    finally:
        _observing.reset(token)


def _observe(envelope: Envelope, handled: Handled) -> None:
    current = _observing.get()
    if current is not None and current[0] == envelope.message_id:
        current[1].append(handled)


@dataclass(frozen=True)
class _Plan:
    """What handling the event will do: which instance, from which version, with which bodies."""

    saga_id: uuid.UUID
    correlation_key: str  # "" for a single-instance flow
    is_new: bool
    version: int
    step_index: int  # the step that handles the event
    state_json: dict[str, Any] | None
    deadline: datetime | None
    bodies: tuple[StepBody, ...]
    advance: bool  # an awaited event moves the saga on; its deadline does not
    step_timers_pending: bool = True  # False: ending the wait has no timer to cancel
    kept_id: int | None = None  # the kept event this plan applies

    @classmethod
    def for_instance(
        cls, instance: SagaInstance | lookup.Found, bodies: tuple[StepBody, ...], *, advance: bool
    ) -> _Plan:
        return cls(
            saga_id=instance.pk,
            correlation_key=instance.correlation_key,
            is_new=False,
            version=instance.version,
            step_index=instance.step_index,
            state_json=instance.state,
            deadline=instance.deadline,
            bodies=bodies,
            advance=advance,
            step_timers_pending=(
                instance.step_timers_pending if isinstance(instance, lookup.Found) else True
            ),
        )


@dataclass(frozen=True)
class _Keep:
    """The event reached the saga early: keep it for the step ``for_step``."""

    saga_id: uuid.UUID
    correlation_key: str
    version: int
    step_index: int  # the step the saga is at
    for_step: int


@dataclass(frozen=True)
class _KeepForKey:
    """The event reached a key with no active saga: keep it for the step ``for_step`` of
    the saga that starts for the key (within ``ENGINE.KEEP_EARLY_FOR``)."""

    correlation_key: str
    for_step: int


@dataclass(frozen=True)
class _Ignored:
    """The event is not for this flow's instance; ``reason`` is the counter's attribute."""

    # "no_instance" | "not_awaited" | "duplicate" | "timer_never_starts" | "kept_limit"
    reason: str
    correlation_key: str
    step_index: int | None = None


#: What planning an event found to do with it (``None``: another definition takes it).
_Planned = _Plan | _Keep | _KeepForKey | _Ignored | None


def _apply(
    flow: FlowDefinition,
    envelope: Envelope,
    plan: Callable[[], _Planned],
) -> _Planned:
    """Plan against the current row, run, commit; re-plan after losing a version race.
    Return the plan carried out."""
    retries = saga_settings.engine.max_conflict_retries
    key = ""
    for attempt in range(retries + 1):
        planned = _fresh(flow, envelope, plan)
        if planned is None:
            return None  # another definition (the instance's own version) takes the event
        if isinstance(planned, _Ignored):
            _ignore(flow, envelope, planned)
            return planned
        key = planned.correlation_key
        try:
            if isinstance(planned, _Keep | _KeepForKey):
                _keep(flow, planned, envelope)
            else:
                _run_and_commit(flow, planned, envelope)
            return planned
        except (window.VersionConflict, kept.LostRace):
            _back_off(attempt)
    raise SagaConcurrencyError(
        f"{flow.saga_type}[{key or '-'}]: {envelope.event_type} {envelope.message_id} lost the "
        f"optimistic-concurrency race {retries + 1} times; raise "
        "BSFT_SAGA['ENGINE']['MAX_CONFLICT_RETRIES'] or reduce contention on this instance"
    )


def _fresh(
    flow: FlowDefinition,
    envelope: Envelope,
    plan: Callable[[], _Planned],
) -> _Planned:
    """``plan()``, made again if the pass delivering the event held writes for its saga.

    A pass commits in groups: a saga an earlier row of the same group advanced is not
    committed yet, so a plan read it as it was. The pass commits it first, then this plans
    against what it wrote (a step it moved on to may await this event).
    """
    planned = plan()
    stager = staging.stager_for(envelope)
    if (
        stager is not None
        and planned is not None
        and stager.make_room(flow.saga_type, planned.correlation_key)
    ):
        planned = plan()
    return planned


def _ignore(flow: FlowDefinition, envelope: Envelope, ignored: _Ignored) -> None:
    telemetry.count_ignored(flow.saga_type, ignored.reason)
    _observe(envelope, Handled(flow.saga_type, FlowOutcome.IGNORED, ignored.reason))
    logger.debug(
        "bsft_saga: %s %s ignored by flow %s (%r), key %r, step %s: %s",
        envelope.event_type,
        envelope.message_id,
        flow.flow_name,
        flow.saga_type,
        ignored.correlation_key,
        "-" if ignored.step_index is None else ignored.step_index,
        ignored.reason,
    )


def _plan_step(
    flow: FlowDefinition,
    key: str,
    step_indices: set[int],
    envelope: Envelope,
    meanwhile: Collection[int] = (),
) -> _Planned:
    """Find the instance for ``key`` and the step that takes the event, or drop it.

    One query reads the active instance and whether it already handled the message; for a
    start event it also finds a finished instance of the key that handled it (a redelivered
    start event starts nothing). ``None``: the instance runs on another version's
    definition, which handles (and counts) the event; only the current version starts
    instances. A timer's event never starts one: a timer belongs to a saga, and its event
    reaching a start step (of another flow, or of its own saga's flow after the saga
    completed) would start a saga nobody asked for, on every firing.
    """
    is_current = flow_registry.is_current(flow)
    is_start = 0 in step_indices and is_current
    timer = envelope.timer
    instance = lookup.instance_for(
        flow.saga_type,
        key,
        envelope.message_id,
        or_finished=is_start and timer is None,
        firing=timer.timer_id if timer is not None else None,
    )
    if instance is None:
        if not is_start:
            if not is_current:
                return None
            # A wait that keeps the type early keeps it for the saga the key starts later
            # (its start event may be deferred, or simply published a moment after this).
            for_step = flow.kept_for(0, envelope.event_type) if timer is None else None
            if for_step is not None:
                return _KeepForKey(key, for_step)
            return _Ignored("no_instance", key)
        if timer is not None:
            return _Ignored("timer_never_starts", key)
        return _Plan(
            saga_id=uuid.uuid4(),
            correlation_key=key,
            is_new=True,
            version=0,
            step_index=0,
            state_json=None,
            deadline=_new_deadline(flow, envelope),
            bodies=flow.steps[0].bodies,
            advance=True,
        )
    if instance.is_complete:
        return _Ignored("duplicate", key, instance.step_index)  # a redelivered start event
    if flow_registry.definition_for(flow.saga_type, instance.flow_version) is not flow:
        return None
    if instance.handled:
        return _Ignored("duplicate", key, instance.step_index)
    if instance.step_index in step_indices:
        step = flow.steps[instance.step_index]
        return _Plan.for_instance(instance, step.bodies, advance=True)
    if instance.step_index in meanwhile:
        during = flow.steps[instance.step_index].meanwhile_for(envelope.event_type)
        assert during is not None
        return _Plan.for_instance(instance, (StepBody(run=during.body),), advance=False)
    # A timer's event belongs to the step that scheduled it: never kept for a later one.
    for_step = flow.kept_for(instance.step_index, envelope.event_type) if timer is None else None
    if for_step is not None:
        return _Keep(instance.pk, key, instance.version, instance.step_index, for_step)
    return _Ignored("not_awaited", key, instance.step_index)


def _keep(flow: FlowDefinition, keeping: _Keep | _KeepForKey, envelope: Envelope) -> None:
    now = clock.now()
    key = keeping.correlation_key
    if isinstance(keeping, _Keep):
        step: int | None = keeping.step_index
        outcome = kept.keep(
            keeping.saga_id,
            keeping.version,
            keeping.for_step,
            envelope,
            saga_type=flow.saga_type,
            correlation_key=key,
            now=now,
        )
    else:
        step = None
        outcome = kept.keep_for_key(flow.saga_type, key, keeping.for_step, envelope, now=now)
    if outcome == kept.DUPLICATE:
        _ignore(flow, envelope, _Ignored("duplicate", key, step))
        return
    if outcome == kept.OVER_LIMIT:
        telemetry.count_ignored(flow.saga_type, "kept_limit")
        _observe(envelope, Handled(flow.saga_type, FlowOutcome.IGNORED, "kept_limit"))
        logger.warning(
            "bsft_saga: %s %s not kept by flow %s (%r), key %r: %s events are kept for it "
            "already (ENGINE.MAX_KEPT_EVENTS_PER_SAGA); ignored",
            envelope.event_type,
            envelope.message_id,
            flow.flow_name,
            flow.saga_type,
            key,
            saga_settings.engine.max_kept_events_per_saga,
        )
        return
    logger.debug(
        "bsft_saga: %s %s kept by flow %s (%r), key %r, step %s, for step %s",
        envelope.event_type,
        envelope.message_id,
        flow.flow_name,
        flow.saga_type,
        key,
        "- (no saga yet)" if step is None else step,
        keeping.for_step,
    )
    _observe(envelope, Handled(flow.saga_type, FlowOutcome.KEPT))


# The sagas whose kept events apply_kept is applying in this context: the windows it
# commits reach steps that may keep events too, and their on_commit leaves those to the
# loop already running for that saga (and to none other: another saga's are applied).
_applying: ContextVar[frozenset[uuid.UUID]] = ContextVar(
    "bsft_saga_applying_kept", default=frozenset()
)


class _Attempt(enum.Enum):
    APPLIED = "applied"
    DEAD_LETTERED = "dead_lettered"  # given up: the saga's next kept event may go
    STOPPED = "stopped"  # nothing ready, failed (backing off), or not applied


def apply_kept(flow: FlowDefinition, saga_id: uuid.UUID) -> int:
    """Apply the kept events of the step ``saga_id`` is at, oldest first, each in a window
    of its own, and then those of each step that reaches in turn, until the saga is at a
    step with none ready (or completes); return how many were applied.

    Run with no transaction open (after the commit that reached the step, or by the
    drain). A window that applies a kept event deletes its row in the same commit, so a
    crash loses none: the row waits for the next drain, and once its claim has run out the
    lost run counts as an attempt (``kept.claim``). A failed one is logged, counted an
    attempt and waits out the retry back-off (``DELIVERY`` ``RETRY_BACKOFF``,
    ``MAX_RETRY_DELAY``), and is dead-lettered at ``MAX_DISPATCH_ATTEMPTS``; it never fails
    the commit that reached the step. The saga's younger kept events wait behind a failing
    one; a dead-lettered one lets them go.
    """
    applying = _applying.get()
    if saga_id in applying:
        return 0
    token = _applying.set(applying | {saga_id})
    applied = 0
    try:
        while (attempt := _apply_next(flow, saga_id)) is not _Attempt.STOPPED:
            if attempt is _Attempt.APPLIED:
                applied += 1
    finally:
        _applying.reset(token)
    return applied


def _apply_next(flow: FlowDefinition, saga_id: uuid.UUID) -> _Attempt:
    """Claim the saga's next kept event and apply it; record a failure on its row."""
    row = kept.next_kept(saga_id)
    if row is None:
        return _Attempt.STOPPED
    claimed = kept.claim(row, now=clock.now())
    if claimed is None:
        return _Attempt.STOPPED  # backing off
    if claimed.dead_lettered or claimed.unreadable:
        return _Attempt.DEAD_LETTERED  # given up by the claim (counted and logged there)
    if not claimed.rows:
        return _Attempt.STOPPED  # another process is applying it
    [row], claim = claimed.rows, claimed.token
    try:
        envelope = kept.envelope_of(row)
        with (
            correlation_scope(envelope.correlation_id),
            telemetry.apply_span(flow.saga_type, row.event_type, trace_context=row.trace_context),
        ):
            planned = _apply(flow, envelope, partial(_plan_kept, flow, row, envelope))
    except Exception as exc:
        if lost_the_connection(exc):
            raise
        config = saga_settings.delivery
        logger.exception(
            "bsft_saga: applying %s to %s saga %s failed (attempt %s of %s)",
            kept.KEPT.describe(row),
            flow.saga_type,
            saga_id,
            row.attempts + 1,
            config.max_dispatch_attempts,
        )
        outcome = record_failure(kept.KEPT, row, claim, failure_reason(exc), config)
        if outcome is Outcome.DEAD_LETTERED:
            kept.KEPT.count(outcome, flow.saga_type)
            return _Attempt.DEAD_LETTERED
        return _Attempt.STOPPED
    duplicate = isinstance(planned, _Ignored) and planned.reason == "duplicate"
    if isinstance(planned, _Plan) or duplicate:
        return _Attempt.APPLIED  # its row went: with the window, or as a duplicate
    kept.release(row, claim)  # not applied (its saga moved on meanwhile): stays
    return _Attempt.STOPPED


def _plan_kept(
    flow: FlowDefinition, row: SagaKeptEvent, envelope: Envelope
) -> _Plan | _Ignored | None:
    """What applying the kept ``row`` does: a plan whose window deletes the row; the row
    dropped as a duplicate (its saga handled the message already); or it stays (``None``,
    ``no_instance``): its saga moved on meanwhile."""
    key = row.correlation_key
    instance = lookup.instance_for(flow.saga_type, key, envelope.message_id, or_finished=False)
    if instance is None or instance.pk != row.saga_id:
        return _Ignored("no_instance", key)
    if instance.handled:
        kept.forget(row.pk)
        return _Ignored("duplicate", key, instance.step_index)
    if instance.step_index != row.step_index:
        return None  # moved on meanwhile: the row waits for its step, or for the end
    step = flow.steps[instance.step_index]
    return replace(_Plan.for_instance(instance, step.bodies, advance=True), kept_id=row.pk)


def apply_stragglers(*, limit: int = 100) -> int:
    """Apply the kept events that are ready and that no commit applies: the commit
    reaching their step was followed by a crash, their retry back-off has run out, or they
    were requeued; return how many were applied.

    Also discards the events kept for a key whose saga did not start within
    ``ENGINE.KEEP_EARLY_FOR`` (counted ignored, ``not_awaited``), and hands those kept while
    their saga was starting to it. Only when an installed flow keeps early events; found
    through partial indexes. Per saga isolated: a broken one is logged and skipped, and a
    saga whose kept event fails takes no other saga's place (the pass goes on to the next
    ready sagas, up to ``limit`` sagas applied); it waits out its back-off.
    """
    if not any(flow.keeps_early for flow in flow_registry.all()):
        return 0
    now = clock.now()
    kept.discard_expired(now=now, limit=limit)
    for saga_id, saga_type, key, flow_version in kept.unadopted(now=now, limit=limit):
        try:
            _adopt_late(saga_id, saga_type, key, flow_version, now=now)
        except Exception:
            logger.exception("bsft_saga: handing kept events to saga %s failed", saga_id)
    applied = moved = 0
    tried: set[uuid.UUID] = set()
    # Sagas whose kept event failed take no place: the pass reads the next ready ones, up
    # to ``limit`` sagas applied (and at most four times as many tried).
    while len(tried) < limit * 4:
        sagas = kept.ready_sagas(limit, now=now, skip=tried)
        if not sagas:
            break
        for saga_id, saga_type, flow_version in sagas:
            tried.add(saga_id)
            try:
                flow = flow_registry.definition_for(saga_type, flow_version)
                if activation.is_active(flow.saga_type):
                    n = apply_kept(flow, saga_id)
                    applied += n
                    moved += bool(n)
            except Exception:
                logger.exception("bsft_saga: applying the kept events of saga %s failed", saga_id)
        if moved >= limit:
            break
    return applied


def _adopt_late(
    saga_id: uuid.UUID, saga_type: str, key: str, flow_version: int, *, now: datetime
) -> None:
    """Give the active saga of a key the events kept for the key while it started (the
    saga's creation did not see them yet), settled as its creation would have."""
    flow = flow_registry.definition_for(saga_type, flow_version)
    with transaction.atomic():
        step = (
            SagaInstance.objects.select_for_update()
            .filter(pk=saga_id, is_complete=False)
            .values_list("step_index", flat=True)
            .first()
        )
        if step is None or not kept.adopt(saga_id, saga_type, key, now=now):
            return
        # Settled as its creation would have: rows for a step it passed move on.
        kept.move_on(saga_id, flow.next_awaiting, reached=step, now=now)


def _new_deadline(flow: FlowDefinition, envelope: Envelope) -> datetime | None:
    """The deadline of the instance ``envelope`` starts: the start event's own deadline,
    the flow's ``with_deadline`` (start + budget), or the earlier of the two.

    The initiator's deadline rides along, so that a saga started by late work knows it is
    late, and never outlives the budget of the request that started it.
    """
    where = flow.where(0)
    deadlines = []
    if envelope.deadline is not None:
        deadlines.append(storable(envelope.deadline, field="deadline", where=where))
    if flow.deadline is not None:
        budget = flow.deadline.budget_for(envelope.event, where=where)
        deadlines.append(storable(clock.now() + budget, field="deadline", where=where))
    return min(deadlines, default=None)


def _handled(instance: SagaInstance, envelope: Envelope) -> bool:
    return SagaInboxEntry.objects.filter(saga=instance, message_id=envelope.message_id).exists()


def _run_and_commit(flow: FlowDefinition, plan: _Plan, envelope: Envelope) -> None:
    nesting.check(flow.where(plan.step_index), envelope.event_type)  # before any body runs
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
        correlation_key=plan.correlation_key or None,
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
                payload=codec.encode(
                    DeadlineExpired(saga_id=str(plan.saga_id), saga_type=flow.saga_type)
                ),
                calendar_key="",
                scope="saga",
            )
        )
    with (
        saga_scope(SagaInScope(flow.saga_type, plan.correlation_key, plan.saga_id)),
        telemetry.step_span(
            flow.saga_type, step_index=plan.step_index, event_type=envelope.event_type
        ),
    ):
        for body in plan.bodies:
            _run_body(body, ctx, envelope.event)
        trace_context = telemetry.current_trace_context()  # the step's: stored with its rows
    step_index = plan.step_index + 1 if plan.advance else plan.step_index
    completes = ctx.effects.completed or (
        plan.advance and flow.auto_complete and step_index >= len(flow.steps)
    )
    reaches_keeping_step = (
        plan.advance
        and not completes
        and step_index < len(flow.steps)
        and bool(flow.steps[step_index].kept_types)
    )
    window.commit(
        window.Transition(
            saga_id=plan.saga_id,
            saga_type=flow.saga_type,
            correlation_key=plan.correlation_key,
            state_type=flow.state_type,
            state=codec.encode(ctx.state),
            flow_version=flow.version,
            is_new=plan.is_new,
            expected_version=plan.version,
            step_index=step_index,
            completes=completes,
            ends_wait=plan.advance and not plan.is_new and plan.step_timers_pending,
            deadline=plan.deadline,
            envelope=envelope,
            effects=ctx.effects,
            now=now,
            kind=_journal_kind(plan, envelope, completes=completes),
            step_before=None if plan.is_new else plan.step_index,
            kept_id=plan.kept_id,
            next_awaiting=flow.next_awaiting if flow.keeps_early else None,
            after_commit=(
                partial(apply_kept, flow, plan.saga_id) if reaches_keeping_step else None
            ),
            trace_context=trace_context,
        )
    )
    _observe(
        envelope,
        Handled(flow.saga_type, FlowOutcome.APPLIED, saga_id=plan.saga_id, starts=plan.is_new),
    )


def _journal_kind(plan: _Plan, envelope: Envelope, *, completes: bool) -> JournalKind:
    if envelope.event_type == DEADLINE_EVENT_TYPE:
        return JournalKind.EXPIRED  # on_expired ran: whether or not it completed the saga
    if completes:
        return JournalKind.COMPLETED
    if plan.is_new:
        return JournalKind.STARTED
    return JournalKind.ADVANCED if plan.advance else JournalKind.HANDLED


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
    # Exponential back-off with full jitter: a loser steps aside long enough for the
    # winners to finish, without the losers retrying in lockstep. Real sleep, not the
    # (possibly frozen) clock.
    time.sleep(random.uniform(0, min(0.25, 0.002 * 2**attempt)))


def _handle_deadline(envelope: Envelope) -> None:
    """Run ``on_expired`` of the instance the deadline timer belongs to, at any step.

    Only that instance's own deadline timer can: the event names a saga id and type, so
    one published by anyone else (``publish()`` refuses it, but a receiver may still send
    it) would expire a saga early, or run another flow's ``on_expired`` against it. Such an
    envelope is logged and ignored.
    """
    event = envelope.event
    assert isinstance(event, DeadlineExpired)
    saga_id = _own_deadline_saga(envelope, event)
    if saga_id is None:
        logger.warning(
            "bsft_saga: %s %s was not sent by its saga's deadline timer; ignored",
            envelope.event_type,
            envelope.message_id,
        )
        return
    active = SagaInstance.objects.active().filter(pk=saga_id)
    found = active.values_list("flow_version", "saga_type").first()
    if found is None:
        return  # completed before its deadline
    flow_version, saga_type = found
    if saga_type != event.saga_type:
        telemetry.count_ignored(saga_type, "not_awaited")
        logger.warning(
            "bsft_saga: %s %s names saga type %r, but saga %s is a %r; ignored",
            envelope.event_type,
            envelope.message_id,
            event.saga_type,
            saga_id,
            saga_type,
        )
        return
    # UnknownFlowVersion if no installed flow declares it: the timer is retried, not dropped.
    flow = flow_registry.definition_for(saga_type, flow_version)
    deadline = flow.deadline
    if deadline is None or not activation.is_active(flow.saga_type):
        return

    def plan() -> _Plan | _Ignored:
        instance = SagaInstance.objects.active().filter(pk=saga_id).first()
        if instance is None:
            return _Ignored("no_instance", "")  # completed before its deadline
        if _handled(instance, envelope):
            return _Ignored("duplicate", instance.correlation_key, instance.step_index)
        return _Plan.for_instance(instance, (StepBody(run=deadline.on_expired),), advance=False)

    _apply(flow, envelope, plan)


def _own_deadline_saga(envelope: Envelope, event: DeadlineExpired) -> uuid.UUID | None:
    """The saga id ``event`` names, if its own deadline timer sent it; else ``None``."""
    timer = envelope.timer
    if timer is None or timer.name != DEADLINE_TIMER_NAME:
        return None
    try:
        saga_id = uuid.UUID(event.saga_id)
    except (TypeError, ValueError, AttributeError):
        return None
    return saga_id if saga_id == timer.saga_id else None
