"""Immutable flow definitions: what the builder produces and the engine runs."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from bsft_saga.exceptions import FlowDefinitionError

Body = Callable[[Any, Any], Any]
Predicate = Callable[[Any, Any], Any]
KeySelector = Callable[[Any], str]

#: The longest correlation key a flow's ``key`` may return (``SagaInstance.correlation_key``).
MAX_CORRELATION_KEY_LENGTH = 200

#: The longest ``with_deadline`` budget (1,000 years): start + budget must stay a date
#: bsft_saga stores, or every start of the flow would fail.
MAX_DEADLINE_BUDGET = timedelta(days=365_000)

#: A ``with_deadline`` budget: a fixed ``timedelta``, or one computed from the start event.
Budget = timedelta | Callable[[Any], timedelta]


@dataclass(frozen=True)
class EmptyState:
    """The state of a ``stateless()`` flow."""


@dataclass(frozen=True)
class Trigger:
    """An event type that wakes a step, and how to find the instance it belongs to."""

    event_class: type
    event_type: str
    key: KeySelector | None
    #: ``keep_early=True``: the event reaching an earlier step is kept for this one.
    keep_early: bool = False

    def key_for(self, event: Any, *, where: Callable[[], str]) -> str:
        """Return the correlation key for ``event`` ("" for single-instance flows).

        A key that is not a ``str`` is a ``TypeError``; one longer than
        ``MAX_CORRELATION_KEY_LENGTH`` is a ``ValueError``, raised before anything is
        written. (Text no database stores cannot reach a key: the codec refuses it in
        every ``str`` field of an event.)

        ``where()`` names the flow and step in the error; it is only called on one.
        """
        if self.key is None:
            return ""
        value = self.key(event)
        if value == "":
            # "" is the single instance's key: a keyed flow's event would reach that one.
            raise ValueError(
                f"{where()}: the key for {self.event_type!r} returned an empty str; a keyed "
                "flow needs a non-empty correlation key"
            )
        # The messages name the type or the length, never the key: it is usually a
        # customer's or an order's id, and errors end up in logs and dead-letter reasons.
        if not isinstance(value, str):
            raise TypeError(
                f"{where()}: the key for {self.event_type!r} returned a value of type "
                f"{type(value).__name__}; a correlation key must be a str "
                f"(use str(...) for ids)."
            )
        # The key is stored on the instance (a 200-character column) and compared in SQL:
        # refused here, before anything is written, the same on every backend.
        if len(value) > MAX_CORRELATION_KEY_LENGTH:
            raise ValueError(
                f"{where()}: the key for {self.event_type!r} is {len(value)} characters long; "
                f"a correlation key holds at most {MAX_CORRELATION_KEY_LENGTH}"
            )
        return value


@dataclass(frozen=True)
class StepBody:
    """One body of a step; ``guard`` decides whether it runs (``then`` has none)."""

    run: Body
    guard: Predicate | None = None
    negate: bool = False


@dataclass(frozen=True)
class Meanwhile:
    """``.meanwhile(E, body)``: while its step waits, an ``E`` runs ``body`` in place."""

    trigger: Trigger
    body: Body


@dataclass(frozen=True)
class StepDefinition:
    index: int
    triggers: tuple[Trigger, ...]
    bodies: tuple[StepBody, ...]
    meanwhile: tuple[Meanwhile, ...] = ()

    @property
    def kept_types(self) -> frozenset[str]:
        """The event types this step keeps when they arrive early (``keep_early=True``)."""
        return frozenset(t.event_type for t in self.triggers if t.keep_early)

    def meanwhile_for(self, event_type: str) -> Meanwhile | None:
        return next((m for m in self.meanwhile if m.trigger.event_type == event_type), None)

    @property
    def label(self) -> str:
        verb = "start_with" if self.index == 0 else "wait_for"
        names = " | ".join(t.event_class.__name__ for t in self.triggers)
        return f"step {self.index} ({verb} {names})"


def budget_problem(budget: Any) -> str | None:
    """What is wrong with ``budget`` as a deadline budget (``None``: nothing), as the end of
    a sentence that names it."""
    if not isinstance(budget, timedelta) or budget <= timedelta(0):
        return f"{budget!r}, where a positive timedelta is needed"
    if budget > MAX_DEADLINE_BUDGET:
        return f"{budget}, longer than the {MAX_DEADLINE_BUDGET.days} days a deadline may lie ahead"
    return None


@dataclass(frozen=True)
class DeadlineDefinition:
    """``with_deadline(budget, on_expired=...)``: ``budget`` is a ``timedelta`` or a callable
    ``budget(start_event) -> timedelta``."""

    budget: Budget
    on_expired: Body

    def budget_for(self, event: Any, *, where: str) -> timedelta:
        """The budget of an instance that ``event`` starts; a computed one that is not a
        positive ``timedelta`` of at most ``MAX_DEADLINE_BUDGET`` is a ``TypeError`` or
        ``ValueError`` naming ``where`` (the flow), raised before anything is written."""
        if isinstance(self.budget, timedelta):
            return self.budget
        budget = self.budget(event)
        problem = budget_problem(budget)
        if problem is None:
            return budget
        error = ValueError if isinstance(budget, timedelta) else TypeError
        raise error(f"{where}: with_deadline's budget({type(event).__name__}) returned {problem}")


@dataclass(frozen=True)
class FlowDefinition:
    """A built flow. Step 0 is the start step; step ``i`` is the ``i``-th ``wait_for``.

    ``version`` is the ``SagaFlow.version`` it was built from: instances that started
    under it are run by this definition until they complete.
    """

    saga_type: str
    flow_name: str
    state_class: type
    steps: tuple[StepDefinition, ...]
    auto_complete: bool
    deadline: DeadlineDefinition | None = None
    version: int = 1
    _routes: Mapping[str, tuple[tuple[int, Trigger], ...]] = field(
        default_factory=dict, repr=False, compare=False
    )
    _meanwhile: Mapping[str, tuple[tuple[int, Trigger], ...]] = field(
        default_factory=dict, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        routes: dict[str, list[tuple[int, Trigger]]] = {}
        for step in self.steps:
            for trigger in step.triggers:
                routes.setdefault(trigger.event_type, []).append((step.index, trigger))
        object.__setattr__(self, "_routes", {k: tuple(v) for k, v in routes.items()})
        meanwhile: dict[str, list[tuple[int, Trigger]]] = {}
        for step in self.steps:
            for m in step.meanwhile:
                meanwhile.setdefault(m.trigger.event_type, []).append((step.index, m.trigger))
        object.__setattr__(self, "_meanwhile", {k: tuple(v) for k, v in meanwhile.items()})

    @property
    def state_type(self) -> str:
        return f"{self.state_class.__module__}.{self.state_class.__qualname__}"

    @property
    def event_types(self) -> frozenset[str]:
        return frozenset(self._routes) | frozenset(self._meanwhile)

    @property
    def keeps_early(self) -> bool:
        """Whether any wait keeps early events: only then do kept rows cost a statement."""
        return any(step.kept_types for step in self.steps)

    def routes(self, event_type: str) -> tuple[tuple[int, Trigger], ...]:
        """The (step index, trigger) pairs that ``event_type`` can wake."""
        return self._routes.get(event_type, ())

    def meanwhile_routes(self, event_type: str) -> tuple[tuple[int, Trigger], ...]:
        """The (step index, trigger) pairs of the waits that run ``event_type`` meanwhile."""
        return self._meanwhile.get(event_type, ())

    def kept_for(self, step_index: int, event_type: str) -> int | None:
        """The step that keeps an ``event_type`` reaching a saga at ``step_index``, or
        ``None``: the next later step that awaits the type, if it keeps it early."""
        for step in self.steps[step_index + 1 :]:
            if event_type in step.kept_types:
                return step.index
            if any(t.event_type == event_type for t in step.triggers):
                return None
        return None

    def next_awaiting(self, step_index: int, event_type: str) -> int | None:
        """The first step after ``step_index`` that awaits ``event_type`` (``None``: no
        later step does): where an event kept for a step the saga passed is applied."""
        for step in self.steps[step_index + 1 :]:
            if any(t.event_type == event_type for t in step.triggers):
                return step.index
        return None

    def new_state(self) -> Any:
        return self.state_class()

    def where(self, step_index: int) -> str:
        if step_index < len(self.steps):
            return f"flow {self.flow_name} ({self.saga_type!r}), {self.steps[step_index].label}"
        return f"flow {self.flow_name} ({self.saga_type!r})"


def check_state_class(state_class: Any, *, flow_name: str) -> None:
    """A state type must be a dataclass constructible with no arguments and JSON-codable."""
    from bsft_saga.events.codec import check_dataclass

    if not (isinstance(state_class, type) and dataclasses.is_dataclass(state_class)):
        raise FlowDefinitionError(
            f"flow {flow_name}: with_state() needs a dataclass, got {state_class!r}"
        )
    missing = [
        f.name
        for f in dataclasses.fields(state_class)
        if f.init and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise FlowDefinitionError(
            f"flow {flow_name}: state {state_class.__name__} needs a default for every field; "
            f"missing: {', '.join(missing)}"
        )
    try:
        check_dataclass(state_class)
    except TypeError as exc:
        raise FlowDefinitionError(f"flow {flow_name}: state {state_class.__name__}: {exc}") from exc
