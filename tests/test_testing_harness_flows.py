"""``SagaHarness(flows=[...])``: only the named flows take events while the harness runs."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from bsft_saga import SagaFlow, publish
from bsft_saga.models import SagaInstance
from bsft_saga.testing import SagaHarness
from tests.support.timer_fixtures import T0
from tests.testapp.engine_events import DeadlineProbeStarted
from tests.testapp.events import OrderPlaced, Tick
from tests.testapp.flows import (
    DEADLINE_PROBE_BUDGET,
    CounterFlow,
    DeadlineProbeFlow,
    OrderFlow,
)

pytestmark = pytest.mark.django_db(transaction=True)


def instances(flow: type[SagaFlow]) -> list[SagaInstance]:
    return list(SagaInstance.objects.filter(saga_type=flow.saga_type))


def test_events_for_flows_outside_the_list_create_nothing() -> None:
    with SagaHarness(start=T0, flows=[OrderFlow]) as harness:
        harness.publish(OrderPlaced("o-1"))
        harness.publish(Tick("c-1", n=1))  # would start a CounterFlow: not in this harness

    assert [saga.correlation_key for saga in instances(OrderFlow)] == ["o-1"]
    assert instances(CounterFlow) == []


def test_events_for_flows_outside_the_list_advance_nothing() -> None:
    publish(Tick("c-2", n=1))
    [before] = instances(CounterFlow)

    with SagaHarness(start=T0, flows=[OrderFlow]) as harness:
        harness.publish(Tick("c-2", n=2))

    [after] = instances(CounterFlow)
    assert (after.step_index, after.version) == (before.step_index, before.version)


def test_deadlines_of_flows_outside_the_list_do_not_run() -> None:
    with SagaHarness(start=T0) as harness:
        harness.publish(DeadlineProbeStarted("d-1"))
    with SagaHarness(start=T0, flows=[OrderFlow]) as harness:
        harness.advance_time(DEADLINE_PROBE_BUDGET + timedelta(minutes=1))
        expired = harness.get_saga(DeadlineProbeFlow, "d-1")

    assert expired is not None
    assert not expired.is_complete
    assert expired.state["expired"] is False


def test_every_flow_takes_events_again_once_the_harness_stops() -> None:
    with SagaHarness(start=T0, flows=[OrderFlow]):
        pass

    publish(Tick("c-3", n=1))

    assert [saga.correlation_key for saga in instances(CounterFlow)] == ["c-3"]


@pytest.mark.parametrize(
    "entry", [CounterFlow, "tests.testapp.flows.CounterFlow", CounterFlow.saga_type]
)
def test_flows_are_named_by_class_dotted_path_or_saga_type(entry: Any) -> None:
    with SagaHarness(start=T0, flows=[OrderFlow, entry]) as harness:
        harness.publish(OrderPlaced("o-2"))
        harness.publish(Tick("c-4", n=1))
        counter = harness.get_saga(CounterFlow, "c-4")

    assert counter is not None
    assert len(instances(OrderFlow)) == 1


def test_an_empty_list_activates_no_flow() -> None:
    with SagaHarness(start=T0, flows=[]) as harness:
        harness.publish(OrderPlaced("o-3"))

    assert instances(OrderFlow) == []


@pytest.mark.parametrize("entry", ["tests.testapp.flows.NoSuchFlow", "no.such.saga-type"])
def test_an_unknown_flow_is_a_lookup_error_naming_it(entry: str) -> None:
    with pytest.raises(LookupError, match=entry.replace(".", r"\.")):
        SagaHarness(flows=[entry])


def test_a_class_that_is_not_a_registered_flow_is_a_lookup_error() -> None:
    class Unregistered:
        pass

    with pytest.raises(LookupError, match="Unregistered"):
        SagaHarness(flows=[Unregistered])
