"""The initiator's deadline rides along: a start event's envelope ``deadline`` becomes the
new instance's deadline; with ``with_deadline`` the earlier of the two; a budget may be
computed from the start event (``with_deadline(budget_of_event, on_expired=...)``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from freezegun.api import FrozenDateTimeFactory

from bsft_saga import Envelope, SagaFlow, publish
from bsft_saga.engine.deadlines import DEADLINE_TIMER_NAME
from bsft_saga.events import event_type_of
from bsft_saga.events.sending import send_envelope
from bsft_saga.flows.graph import render_mermaid
from bsft_saga.flows.registry import flow_registry
from bsft_saga.models import SagaInstance, SagaOutboxMessage
from bsft_saga.testing import SagaHarness
from bsft_saga.timeouts import drain_due
from tests.support.deploys import running_release
from tests.support.timer_fixtures import T0
from tests.testapp.delayed_events import (
    CarrierRequested,
    PriceCheckRequested,
    ShipmentBooked,
    SupplierAsked,
)
from tests.testapp.delayed_flows import (
    EXPRESS_BUDGET,
    STANDARD_BUDGET,
    PriceCheckFlow,
    ShipmentFlow,
)
from tests.testapp.timer_events import ProbePoked, ProbeStarted
from tests.testapp.timer_flows import the_saga, timers_of

pytestmark = pytest.mark.django_db

Action = Callable[[Callable[[Any, Any], None]], str]


def _deadline_timer(flow: type[SagaFlow], key: str) -> Any:
    return next(row for row in timers_of(flow, key) if row.name == DEADLINE_TIMER_NAME)


# --- a flow without with_deadline ------------------------------------------------------


def _deadlines_published(event_class: type) -> list[datetime | None]:
    """The deadlines the outbox rows of ``event_class`` carry, oldest row first."""
    rows = SagaOutboxMessage.objects.filter(event_type=event_type_of(event_class))
    return list(rows.order_by("created_at", "id").values_list("deadline", flat=True))


def test_the_start_events_deadline_becomes_the_deadline_of_the_saga(
    clock: FrozenDateTimeFactory,
) -> None:
    publish(PriceCheckRequested("pc-1"), deadline=T0 + timedelta(hours=1))

    saga = the_saga(PriceCheckFlow, "pc-1")
    assert saga.deadline == T0 + timedelta(hours=1)
    assert _deadlines_published(SupplierAsked) == [T0 + timedelta(hours=1)]
    assert timers_of(PriceCheckFlow, "pc-1") == []  # no on_expired: nothing to run at it


def test_a_start_event_without_deadline_leaves_such_a_saga_without_one(
    clock: FrozenDateTimeFactory,
) -> None:
    publish(PriceCheckRequested("pc-2"))

    assert the_saga(PriceCheckFlow, "pc-2").deadline is None


def test_every_later_step_sees_the_start_events_deadline_and_its_events_carry_it(
    clock: FrozenDateTimeFactory, action: Action
) -> None:
    seen: list[datetime | None] = []

    def note(ctx: Any, e: Any) -> None:
        seen.append(ctx.deadline)
        ctx.publish(CarrierRequested(ctx.correlation_key))

    deadline = T0 + timedelta(minutes=45)

    publish(ProbeStarted("p-1", action(note)), deadline=deadline)
    publish(ProbePoked("p-1", action(note)))  # no deadline of its own
    publish(ProbePoked("p-1", action(note)), deadline=T0 + timedelta(days=9))

    assert seen == [deadline] * 3
    assert _deadlines_published(CarrierRequested) == [deadline] * 3


# --- with_deadline: the earlier of the two ---------------------------------------------


def test_an_earlier_start_event_deadline_wins_over_the_flows_budget(
    clock: FrozenDateTimeFactory,
) -> None:
    deadline = T0 + timedelta(hours=1)  # the standard budget is two days

    publish(ShipmentBooked("s-1"), deadline=deadline)

    assert the_saga(ShipmentFlow, "s-1").deadline == deadline
    assert _deadline_timer(ShipmentFlow, "s-1").due_at == deadline
    assert _deadlines_published(CarrierRequested) == [deadline]

    clock.move_to(deadline - timedelta(seconds=1))
    assert drain_due().fired == 0
    clock.move_to(deadline)
    assert drain_due().fired == 1
    saga = the_saga(ShipmentFlow, "s-1")
    assert (saga.state, saga.is_complete, saga.completed_at) == ({"late": True}, True, deadline)


def test_the_flows_budget_wins_over_a_later_start_event_deadline(
    clock: FrozenDateTimeFactory,
) -> None:
    publish(ShipmentBooked("s-2", express=True), deadline=T0 + timedelta(days=1))

    assert the_saga(ShipmentFlow, "s-2").deadline == T0 + EXPRESS_BUDGET
    assert _deadline_timer(ShipmentFlow, "s-2").due_at == T0 + EXPRESS_BUDGET


def test_a_start_event_whose_deadline_has_passed_expires_its_saga_at_the_next_pass(
    clock: FrozenDateTimeFactory,
) -> None:
    publish(ShipmentBooked("s-3"), deadline=T0 - timedelta(minutes=1))

    assert drain_due().fired == 1
    assert the_saga(ShipmentFlow, "s-3").state == {"late": True}


def test_a_start_event_with_a_deadline_no_database_stores_is_refused_naming_the_flow(
    clock: FrozenDateTimeFactory,
) -> None:
    event = PriceCheckRequested("pc-3")
    envelope = Envelope(
        message_id=uuid.uuid4(),
        event=event,
        event_type=event_type_of(event),
        correlation_id=None,
        causation_id=None,
        deadline=datetime(2026, 3, 2, 12, 0),  # naive: sent around publish(), which refuses it
        published_at=T0,
    )

    with pytest.raises(ValueError, match=r"^flow \S+PriceCheckFlow .*: deadline must be an aware"):
        send_envelope(envelope)
    assert not SagaInstance.objects.filter(saga_type=PriceCheckFlow.saga_type).exists()


# --- a budget computed from the start event ----------------------------------------------


@pytest.mark.parametrize(("express", "budget"), [(True, EXPRESS_BUDGET), (False, STANDARD_BUDGET)])
def test_a_budget_computed_from_the_start_event_sets_the_deadline_and_its_timer(
    clock: FrozenDateTimeFactory, express: bool, budget: timedelta
) -> None:
    publish(ShipmentBooked("s-4", express=express))

    assert the_saga(ShipmentFlow, "s-4").deadline == T0 + budget
    assert _deadline_timer(ShipmentFlow, "s-4").due_at == T0 + budget


@pytest.fixture
def harness(transactional_db: None) -> Iterator[SagaHarness]:
    with SagaHarness(start=T0) as harness:
        yield harness


def test_an_express_shipment_is_late_after_four_hours(harness: SagaHarness) -> None:
    harness.publish(ShipmentBooked("s-5", express=True))

    harness.advance_time(EXPRESS_BUDGET - timedelta(seconds=1))
    assert harness.state(ShipmentFlow, "s-5").late is False
    harness.advance_time(timedelta(seconds=1))

    assert harness.state(ShipmentFlow, "s-5").late is True


@pytest.mark.parametrize(
    ("returned", "error", "message"),
    [
        (None, TypeError, "returned None, where a positive timedelta is needed"),
        (3600, TypeError, "returned 3600, where a positive timedelta is needed"),
        (timedelta(0), ValueError, r"returned datetime.timedelta\(0\), where a positive"),
        (timedelta(days=365_001), ValueError, "longer than the 365000 days"),
    ],
    ids=["none", "seconds", "zero", "too-long"],
)
def test_a_computed_budget_that_is_no_positive_timedelta_fails_the_start_and_writes_nothing(
    clock: FrozenDateTimeFactory, returned: Any, error: type[Exception], message: str
) -> None:
    class ComputedBudgetFlow(SagaFlow):
        saga_type = "tests.delayed.computed-budget"

        def configure(self, factory: Any) -> None:
            (
                factory.stateless()
                .with_deadline(lambda e: returned, on_expired=lambda ctx, e: None)
                .start_with(ProbeStarted, key=lambda e: e.probe_id)
                .complete()
            )

    with running_release(ComputedBudgetFlow), pytest.raises(error) as raised:
        publish(ProbeStarted("p-1"))

    assert raised.match(
        r"^flow \S+ComputedBudgetFlow \('tests\.delayed\.computed-budget'\), step 0 "
        rf"\(start_with ProbeStarted\): with_deadline's budget\(ProbeStarted\) .*{message}"
    )
    assert not SagaInstance.objects.filter(saga_type=ComputedBudgetFlow.saga_type).exists()
    assert not SagaOutboxMessage.objects.exists()


def test_the_flow_graph_names_a_computed_budget() -> None:
    text = render_mermaid(flow_registry.get(ShipmentFlow))

    assert "deadline start + _shipment_budget(event), on expiry _shipment_late" in text
