"""The fluent flow builder handed to ``SagaFlow.configure``.

Each call is checked as it is made, so a mistake is reported at the builder call that
made it, naming the flow and the step.
"""

from __future__ import annotations

from typing import Any

from bsft_saga.events.registry import event_type_of
from bsft_saga.exceptions import FlowDefinitionError
from bsft_saga.flows.definition import (
    MAX_DEADLINE_BUDGET,
    Body,
    Budget,
    DeadlineDefinition,
    EmptyState,
    FlowDefinition,
    KeySelector,
    Meanwhile,
    Predicate,
    StepBody,
    StepDefinition,
    Trigger,
    budget_problem,
    check_state_class,
)

__all__ = ["MAX_DEADLINE_BUDGET", "FlowBuilder", "SagaBuilderFactory"]


class SagaBuilderFactory:
    """Starts a flow definition: ``factory.with_state(State)`` or ``factory.stateless()``."""

    def __init__(self, *, flow_name: str, saga_type: str, version: int = 1) -> None:
        self.flow_name = flow_name
        self.saga_type = saga_type
        self.version = version
        self.builder: FlowBuilder | None = None

    def with_state(self, state_type: type) -> FlowBuilder:
        """Start a stateful flow; ``state_type`` is a dataclass with a default for every field."""
        check_state_class(state_type, flow_name=self.flow_name)
        return self._start(state_type)

    def stateless(self) -> FlowBuilder:
        """Start a flow with no state of its own (``ctx.state`` is an ``EmptyState``)."""
        return self._start(EmptyState)

    def _start(self, state_class: type) -> FlowBuilder:
        if self.builder is not None:
            raise FlowDefinitionError(
                f"flow {self.flow_name}: with_state()/stateless() called twice in configure()"
            )
        self.builder = FlowBuilder(self, state_class)
        return self.builder

    def result(self) -> FlowDefinition:
        if self.builder is None:
            raise FlowDefinitionError(
                f"flow {self.flow_name}: configure() must call factory.with_state(...) "
                "or factory.stateless()"
            )
        if self.builder.definition is None:
            raise FlowDefinitionError(
                f"flow {self.flow_name}: configure() must end with .complete() or .build()"
            )
        return self.builder.definition


class FlowBuilder:
    """Chainable description of a flow's steps."""

    def __init__(self, factory: SagaBuilderFactory, state_class: type) -> None:
        self._factory = factory
        self._state_class = state_class
        self._steps: list[tuple[list[Trigger], list[StepBody]]] = []
        self._meanwhile: dict[int, list[Meanwhile]] = {}
        self._deadline: DeadlineDefinition | None = None
        self.definition: FlowDefinition | None = None

    # -- errors -------------------------------------------------------------------------

    def _fail(self, message: str) -> FlowDefinitionError:
        where = f"flow {self._factory.flow_name}"
        if self._steps:
            index = len(self._steps) - 1
            verb = "start_with" if index == 0 else "wait_for"
            names = " | ".join(t.event_class.__name__ for t in self._steps[-1][0])
            where += f", step {index} ({verb} {names})"
        return FlowDefinitionError(f"{where}: {message}")

    def _check_open(self, method: str) -> None:
        if self.definition is not None:
            raise self._fail(f"{method}() after complete()/build()")

    def _trigger(
        self, method: str, event_class: Any, key: KeySelector | None, *, keep_early: bool = False
    ) -> Trigger:
        if not isinstance(event_class, type):
            raise self._fail(f"{method}() needs an event class, got {event_class!r}")
        try:
            event_type = event_type_of(event_class)
        except TypeError as exc:
            raise self._fail(f"{method}(): {exc}") from exc
        if key is not None and not callable(key):
            raise self._fail(f"{method}(): key must be a callable event -> str, got {key!r}")
        return Trigger(
            event_class=event_class, event_type=event_type, key=key, keep_early=bool(keep_early)
        )

    def _current_step(self, method: str) -> tuple[list[Trigger], list[StepBody]]:
        self._check_open(method)
        if not self._steps:
            raise self._fail(f"{method}() before start_with(): the flow has no start step yet")
        return self._steps[-1]

    # -- definition ---------------------------------------------------------------------

    def with_deadline(self, budget: Budget, *, on_expired: Body) -> FlowBuilder:
        """Give each instance an absolute deadline of start + ``budget``.

        ``budget`` is a positive ``timedelta`` of at most ``MAX_DEADLINE_BUDGET``, or a
        callable ``budget(start_event)`` that returns one (checked at each start: anything
        else fails that start). When the start event's envelope carries a deadline of its
        own, the earlier of the two is the instance's. At the deadline an instance that is
        still active runs ``on_expired(ctx, event)``, whatever step it is at, under the same
        atomicity rules as any step.
        """
        self._check_open("with_deadline")
        if self._steps:
            raise self._fail("with_deadline() must come right after with_state()/stateless()")
        problem = None if callable(budget) else budget_problem(budget)
        if problem is not None:
            raise self._fail(f"with_deadline() got the budget {problem}")
        if not callable(on_expired):
            raise self._fail("with_deadline() needs a callable on_expired(ctx, event)")
        self._deadline = DeadlineDefinition(budget=budget, on_expired=on_expired)
        return self

    def start_with(self, event_class: type, key: KeySelector | None = None) -> FlowBuilder:
        """The event that creates an instance; ``key`` maps it to its correlation key."""
        self._check_open("start_with")
        if self._steps:
            raise self._fail("start_with() may be called only once, as the first step")
        self._steps.append(([self._trigger("start_with", event_class, key)], []))
        return self

    def wait_for(
        self, event_class: type, key: KeySelector | None = None, *, keep_early: bool = False
    ) -> FlowBuilder:
        """The next awaited event: a new step.

        ``keep_early=True``: an ``event_class`` event that reaches an active saga at an
        earlier step (one that does not await it) is kept, and applied, in its own window,
        right after the commit that reaches this step, instead of being ignored.
        """
        self._current_step("wait_for")
        self._steps.append(
            ([self._trigger("wait_for", event_class, key, keep_early=keep_early)], [])
        )
        return self

    def or_(
        self, event_class: type, key: KeySelector | None = None, *, keep_early: bool = False
    ) -> FlowBuilder:
        """An alternative event for the current step (``keep_early`` as for ``wait_for``)."""
        triggers, bodies = self._current_step("or_")
        if bodies:
            raise self._fail("or_() must come before the step's then()/when() bodies")
        trigger = self._trigger("or_", event_class, key, keep_early=keep_early)
        if any(t.event_type == trigger.event_type for t in triggers):
            raise self._fail(f"{event_class.__name__} is already awaited by this step")
        triggers.append(trigger)
        return self

    def meanwhile(
        self, event_class: type, body: Body, key: KeySelector | None = None
    ) -> FlowBuilder:
        """While the current wait lasts, run ``body(ctx, event)`` for each ``event_class``.

        The saga stays at its step (``step_index`` is unchanged, ``version`` moves on);
        the body has the step's context, and step-scoped timers it schedules belong to the
        waiting step: the end of the wait cancels them.
        """
        self._current_step("meanwhile")
        if len(self._steps) == 1:
            raise self._fail("meanwhile() belongs to a wait: call it after wait_for()")
        self._check_callable("meanwhile", body)
        trigger = self._trigger("meanwhile", event_class, key)
        index = len(self._steps) - 1
        declared = self._meanwhile.setdefault(index, [])
        if any(m.trigger.event_type == trigger.event_type for m in declared):
            raise self._fail(f"meanwhile() for {event_class.__name__} is already declared")
        declared.append(Meanwhile(trigger=trigger, body=body))
        return self

    def then(self, body: Body) -> FlowBuilder:
        """Add a body ``body(ctx, event)``, plain or ``async def``, to the current step."""
        _, bodies = self._current_step("then")
        self._check_callable("then", body)
        bodies.append(StepBody(run=body))
        return self

    def when(self, predicate: Predicate, body: Body) -> FlowBuilder:
        """Add a body that runs only if ``predicate(ctx, event)`` holds."""
        _, bodies = self._current_step("when")
        self._check_callable("when", predicate)
        self._check_callable("when", body)
        bodies.append(StepBody(run=body, guard=predicate))
        return self

    def when_not(self, predicate: Predicate, body: Body) -> FlowBuilder:
        """Add a body that runs only if ``predicate(ctx, event)`` does not hold."""
        _, bodies = self._current_step("when_not")
        self._check_callable("when_not", predicate)
        self._check_callable("when_not", body)
        bodies.append(StepBody(run=body, guard=predicate, negate=True))
        return self

    def _check_callable(self, method: str, value: Any) -> None:
        if not callable(value):
            raise self._fail(f"{method}() needs a callable (ctx, event), got {value!r}")

    def complete(self) -> FlowDefinition:
        """Finish the definition; an instance completes after its last step."""
        return self._finish(auto_complete=True)

    def build(self) -> FlowDefinition:
        """Finish the definition without auto-completion (steps call ``ctx.mark_complete()``)."""
        return self._finish(auto_complete=False)

    def _finish(self, *, auto_complete: bool) -> FlowDefinition:
        self._check_open("complete" if auto_complete else "build")
        if not self._steps:
            raise self._fail("the flow has no start step: call start_with(Event, key=...)")
        self.definition = FlowDefinition(
            saga_type=self._factory.saga_type,
            flow_name=self._factory.flow_name,
            state_class=self._state_class,
            steps=tuple(
                StepDefinition(
                    index=i,
                    triggers=tuple(triggers),
                    bodies=tuple(bodies),
                    meanwhile=tuple(self._meanwhile.get(i, ())),
                )
                for i, (triggers, bodies) in enumerate(self._steps)
            ),
            auto_complete=auto_complete,
            deadline=self._deadline,
            version=self._factory.version,
        )
        return self.definition
