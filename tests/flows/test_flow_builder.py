"""The flow builder: what each method means when events arrive, and the mistakes it refuses.

Behaviour is shown through the flows of ``tests.testapp.flows``, which the test app lists in
``saga_flows``; definition errors through small flows built here with ``build_definition()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from freezegun import freeze_time

from bsft_saga import SagaFlow, publish
from bsft_saga.events import codec
from bsft_saga.exceptions import FlowDefinitionError
from bsft_saga.flows import EmptyState
from bsft_saga.flows.registry import flow_registry
from bsft_saga.models import SagaInboxEntry, SagaInstance
from bsft_saga.testing import SagaHarness
from tests.testapp.engine_events import DeadlineProbeStarted
from tests.testapp.events import (
    AsyncStarted,
    BadKeyEvent,
    OrderCanceled,
    OrderPlaced,
    OrderShipped,
    Ping,
    StockReserved,
)
from tests.testapp.flows import (
    DEADLINE_PROBE_BUDGET,
    AsyncBodyFlow,
    AsyncState,
    BadKeyFlow,
    DeadlineProbeFlow,
    DeadlineProbeState,
    OrderFlow,
    OrderState,
    PingState,
    SingleInstanceFlow,
    StatelessFlow,
)

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)


def instance(flow: type[SagaFlow], key: str) -> SagaInstance:
    """The newest instance of ``flow`` for ``key``."""
    return SagaInstance.objects.for_key(flow.saga_type, key).latest("created_at")


def order_state(key: str) -> OrderState:
    return codec.decode(OrderState, instance(OrderFlow, key).state)


# --- with_state / stateless -----------------------------------------------------------


def test_with_state_stores_the_state_dataclass_as_json_between_steps() -> None:
    publish(OrderPlaced("o-1", total=Decimal("120.00")))
    row = instance(OrderFlow, "o-1")
    assert row.state_type == "tests.testapp.flows.OrderState"
    assert row.state["total"] == "120.00"
    publish(StockReserved("o-1"))
    assert order_state("o-1") == OrderState(
        total=Decimal("120.00"),
        reserved=True,
        big_order=True,
        log=["placed", "StockReserved"],
    )


def test_a_stateless_flow_keeps_an_empty_state() -> None:
    publish(OrderShipped("o-1"))
    row = instance(StatelessFlow, "o-1")
    assert row.state == {}
    assert row.state_type == f"{EmptyState.__module__}.{EmptyState.__qualname__}"


# --- start_with / wait_for / or_ ------------------------------------------------------


def test_start_with_creates_one_instance_per_key() -> None:
    publish(OrderPlaced("o-1"))
    publish(OrderPlaced("o-2"))
    keys = SagaInstance.objects.filter(saga_type=OrderFlow.saga_type).values_list(
        "correlation_key", flat=True
    )
    assert sorted(keys) == ["o-1", "o-2"]


def test_an_awaited_event_for_which_no_instance_exists_starts_nothing() -> None:
    publish(StockReserved("o-unknown"))
    assert not SagaInstance.objects.filter(saga_type=OrderFlow.saga_type).exists()


def test_wait_for_advances_the_instance_its_key_names() -> None:
    publish(OrderPlaced("o-1"))
    publish(OrderPlaced("o-2"))
    publish(StockReserved("o-2"))
    assert instance(OrderFlow, "o-1").step_index == 1
    assert instance(OrderFlow, "o-2").step_index == 2
    assert order_state("o-2").reserved


def test_or_offers_an_alternative_event_for_the_same_step() -> None:
    publish(OrderPlaced("o-1"))
    publish(OrderCanceled("o-1", reason="changed mind"))
    state = order_state("o-1")
    assert state.canceled
    assert not state.reserved
    assert state.log == ["placed", "OrderCanceled"]


# --- then / when / when_not -----------------------------------------------------------


def test_then_runs_the_body_with_the_context_and_the_event() -> None:
    publish(OrderPlaced("o-1", total=Decimal("7.00")))
    state = order_state("o-1")
    assert state.total == Decimal("7.00")
    assert state.log == ["placed"]


def test_when_runs_its_body_only_if_the_predicate_holds() -> None:
    publish(OrderPlaced("o-1", total=Decimal("150")))
    publish(StockReserved("o-1"))
    state = order_state("o-1")
    assert state.big_order
    assert not state.small_order


def test_when_not_runs_its_body_only_if_the_predicate_does_not_hold() -> None:
    publish(OrderPlaced("o-1", total=Decimal("5")))
    publish(StockReserved("o-1"))
    state = order_state("o-1")
    assert state.small_order
    assert not state.big_order


def test_a_step_advances_whether_or_not_its_guarded_bodies_ran() -> None:
    publish(OrderPlaced("small", total=Decimal("5")))
    publish(OrderPlaced("big", total=Decimal("500")))
    publish(StockReserved("small"))
    publish(StockReserved("big"))
    assert instance(OrderFlow, "small").step_index == 2
    assert instance(OrderFlow, "big").step_index == 2


def test_several_bodies_of_a_step_run_in_declaration_order() -> None:
    publish(AsyncStarted("job-1"))
    state = codec.decode(AsyncState, instance(AsyncBodyFlow, "job-1").state)
    assert state.steps == ["async:job-1", "sync"]


def test_an_async_body_is_awaited_before_the_step_commits() -> None:
    publish(AsyncStarted("job-2"))
    state = codec.decode(AsyncState, instance(AsyncBodyFlow, "job-2").state)
    assert "async:job-2" in state.steps


@pytest.mark.django_db(transaction=True)
def test_async_code_publishes_through_sync_to_async() -> None:
    async def handle_request() -> None:
        await sync_to_async(publish)(AsyncStarted("job-3"))

    async_to_sync(handle_request)()
    state = codec.decode(AsyncState, instance(AsyncBodyFlow, "job-3").state)
    assert state.steps == ["async:job-3", "sync"]


# --- complete / build -----------------------------------------------------------------


def test_complete_finishes_the_instance_after_its_last_step() -> None:
    with freeze_time(NOW):
        publish(OrderPlaced("o-1"))
        publish(StockReserved("o-1"))
        assert not instance(OrderFlow, "o-1").is_complete
        publish(OrderShipped("o-1"))
    row = instance(OrderFlow, "o-1")
    assert row.is_complete
    assert row.completed_at == NOW
    assert codec.decode(OrderState, row.state).shipped


def test_build_leaves_the_instance_active_after_its_last_step() -> None:
    publish(AsyncStarted("job-1"))
    row = instance(AsyncBodyFlow, "job-1")
    assert row.step_index == len(flow_registry.get(AsyncBodyFlow).steps)
    assert not row.is_complete
    assert row.completed_at is None


# --- keys -----------------------------------------------------------------------------


def test_a_flow_without_keys_has_a_single_instance() -> None:
    publish(Ping("first"))
    publish(Ping("second"))
    rows = SagaInstance.objects.filter(saga_type=SingleInstanceFlow.saga_type)
    assert rows.count() == 1
    row = rows.get()
    assert row.correlation_key == ""
    assert row.is_complete
    assert codec.decode(PingState, row.state).pings == 2


def test_a_key_that_returns_a_non_string_is_a_type_error_naming_the_flow_and_step() -> None:
    with pytest.raises(TypeError) as raised:
        publish(BadKeyEvent(42))
    message = str(raised.value)
    assert "tests.testapp.flows.BadKeyFlow" in message
    assert "step 0 (start_with BadKeyEvent)" in message
    assert "int" in message
    assert not SagaInstance.objects.filter(saga_type=BadKeyFlow.saga_type).exists()
    assert not SagaInboxEntry.objects.exists()


# --- with_deadline --------------------------------------------------------------------


def test_with_deadline_sets_the_instance_deadline_to_start_plus_budget() -> None:
    with freeze_time(NOW):
        publish(DeadlineProbeStarted("p-1"))
    assert instance(DeadlineProbeFlow, "p-1").deadline == NOW + DEADLINE_PROBE_BUDGET


@pytest.mark.django_db(transaction=True)
def test_with_deadline_runs_on_expired_when_the_budget_runs_out() -> None:
    with SagaHarness(start=NOW) as harness:
        harness.publish(DeadlineProbeStarted("p-1"))
        harness.advance_time(DEADLINE_PROBE_BUDGET - timedelta(seconds=1))
        assert not harness.state(DeadlineProbeFlow, "p-1").expired
        harness.advance_time(timedelta(seconds=1))
        assert harness.state(DeadlineProbeFlow, "p-1") == DeadlineProbeState(expired=True)
        row = harness.get_saga(DeadlineProbeFlow, "p-1")
    assert row is not None
    assert row.is_complete
    assert row.completed_at == NOW + DEADLINE_PROBE_BUDGET


# --- definition errors ----------------------------------------------------------------


@dataclass
class CountState:
    count: int = 0


@dataclass
class StateWithoutDefaults:
    order_id: str
    count: int = 0


class NotAnEventClass:
    pass


def _noop(ctx: Any, e: Any) -> None:
    pass


class NoStartStepFlow(SagaFlow):
    def configure(self, factory: Any) -> None:
        factory.with_state(CountState).complete()


class ThenBeforeStartFlow(SagaFlow):
    def configure(self, factory: Any) -> None:
        factory.with_state(CountState).then(_noop)


class OrAfterThenFlow(SagaFlow):
    def configure(self, factory: Any) -> None:
        (
            factory.with_state(CountState)
            .start_with(OrderPlaced, key=lambda e: e.order_id)
            .wait_for(StockReserved, key=lambda e: e.order_id)
            .then(_noop)
            .or_(OrderCanceled, key=lambda e: e.order_id)
        )


class StateWithoutDefaultsFlow(SagaFlow):
    def configure(self, factory: Any) -> None:
        factory.with_state(StateWithoutDefaults).start_with(OrderPlaced).complete()


class MissingCompleteFlow(SagaFlow):
    def configure(self, factory: Any) -> None:
        factory.with_state(CountState).start_with(OrderPlaced).then(_noop)


class NonEventStartFlow(SagaFlow):
    def configure(self, factory: Any) -> None:
        factory.stateless().start_with(NotAnEventClass).complete()


class NonEventWaitFlow(SagaFlow):
    def configure(self, factory: Any) -> None:
        factory.stateless().start_with(OrderPlaced).then(_noop).wait_for(NotAnEventClass)


def definition_error(flow: type[SagaFlow]) -> str:
    with pytest.raises(FlowDefinitionError) as raised:
        flow.build_definition()
    return str(raised.value)


def test_a_flow_without_a_start_step_is_refused_naming_the_flow() -> None:
    message = definition_error(NoStartStepFlow)
    assert "tests.flows.test_flow_builder.NoStartStepFlow" in message
    assert "no start step" in message


def test_then_before_start_with_is_refused_naming_the_flow() -> None:
    message = definition_error(ThenBeforeStartFlow)
    assert "tests.flows.test_flow_builder.ThenBeforeStartFlow" in message
    assert "then() before start_with()" in message


def test_or_after_a_steps_body_is_refused_naming_the_flow_and_step() -> None:
    message = definition_error(OrAfterThenFlow)
    assert "tests.flows.test_flow_builder.OrAfterThenFlow" in message
    assert "step 1 (wait_for StockReserved)" in message
    assert "or_()" in message


def test_a_state_field_without_a_default_is_refused_naming_the_field() -> None:
    message = definition_error(StateWithoutDefaultsFlow)
    assert "tests.flows.test_flow_builder.StateWithoutDefaultsFlow" in message
    assert "StateWithoutDefaults" in message
    assert "order_id" in message


def test_a_configure_that_never_completes_or_builds_is_refused() -> None:
    message = definition_error(MissingCompleteFlow)
    assert "tests.flows.test_flow_builder.MissingCompleteFlow" in message
    assert ".complete() or .build()" in message


def test_a_start_event_that_is_not_an_event_class_is_refused() -> None:
    message = definition_error(NonEventStartFlow)
    assert "tests.flows.test_flow_builder.NonEventStartFlow" in message
    assert "start_with()" in message
    assert "NotAnEventClass is not an event" in message


def test_an_awaited_class_that_is_not_an_event_is_refused_naming_the_step_before() -> None:
    message = definition_error(NonEventWaitFlow)
    assert "tests.flows.test_flow_builder.NonEventWaitFlow" in message
    assert "step 0 (start_with OrderPlaced)" in message
    assert "wait_for()" in message
    assert "NotAnEventClass is not an event" in message


@pytest.mark.parametrize(
    ("configure", "expected"),
    [
        (lambda f: None, "must call factory.with_state"),
        (lambda f: (f.stateless(), f.stateless()), "called twice"),
        (lambda f: f.with_state(NotAnEventClass), "needs a dataclass"),
        (
            lambda f: (
                f.stateless()
                .start_with(OrderPlaced)
                .with_deadline(timedelta(hours=1), on_expired=_noop)
            ),
            "right after with_state()",
        ),
        (
            lambda f: f.stateless().with_deadline(timedelta(0), on_expired=_noop),
            "positive timedelta",
        ),
        (lambda f: f.stateless().start_with(OrderPlaced).start_with(OrderPlaced), "only once"),
        (lambda f: f.stateless().start_with(OrderPlaced, key="order_id"), "key must be a callable"),
        (lambda f: f.stateless().start_with(OrderPlaced).then("not callable"), "needs a callable"),
        (
            lambda f: f.stateless().start_with(OrderPlaced).or_(OrderPlaced),
            "already awaited by this step",
        ),
        (
            lambda f: f.stateless().start_with(OrderPlaced).complete() and None,
            None,  # valid: the control case
        ),
    ],
    ids=[
        "no-state-call",
        "state-twice",
        "state-not-a-dataclass",
        "deadline-after-start",
        "deadline-not-positive",
        "two-starts",
        "key-not-callable",
        "body-not-callable",
        "same-event-twice-in-a-step",
        "valid",
    ],
)
def test_the_builder_refuses_other_mistakes_when_they_are_made(
    configure: Any, expected: str | None
) -> None:
    class Flow(SagaFlow):
        saga_type = "tests.builder.mistake"

        def configure(self, factory: Any) -> None:
            configure(factory)

    if expected is None:
        assert Flow.build_definition().saga_type == "tests.builder.mistake"
        return
    with pytest.raises(FlowDefinitionError, match=expected) as raised:
        Flow.build_definition()
    assert str(raised.value).startswith(f"flow {__name__}.")


def test_the_builder_refuses_changes_after_complete() -> None:
    class Flow(SagaFlow):
        def configure(self, factory: Any) -> None:
            builder = factory.stateless().start_with(OrderPlaced)
            builder.complete()
            builder.then(_noop)

    with pytest.raises(FlowDefinitionError, match=r"then\(\) after complete\(\)/build\(\)"):
        Flow.build_definition()


def test_saga_type_defaults_to_the_flows_dotted_path() -> None:
    class Unnamed(SagaFlow):
        def configure(self, factory: Any) -> None:
            factory.stateless().start_with(OrderPlaced).complete()

    expected = f"{__name__}.{Unnamed.__qualname__}"
    assert Unnamed.saga_type == expected
    assert Unnamed.build_definition().saga_type == expected


def test_the_type_error_of_a_non_string_key_names_its_type_but_never_its_value() -> None:
    # A key is usually a customer's or an order's id: it must not reach logs through errors.
    with pytest.raises(TypeError) as raised:
        publish(BadKeyEvent(987654321))

    assert "a correlation key must be a str" in str(raised.value)
    assert "returned a value of type int" in str(raised.value)
    assert "987654321" not in str(raised.value)


def test_a_deadline_budget_beyond_a_thousand_years_is_refused() -> None:
    class Flow(SagaFlow):
        saga_type = "tests.builder.far-deadline"

        def configure(self, factory: Any) -> None:
            factory.stateless().with_deadline(timedelta(days=365_001), on_expired=_noop)

    with pytest.raises(FlowDefinitionError, match="longer than the 365000 days"):
        Flow.build_definition()
