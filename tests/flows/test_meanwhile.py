"""``.meanwhile(E, body)``: while a step waits, ``E`` runs ``body`` without moving the saga
on; the docs' dunning flow (remind every three business days until paid, five times at
most, then cancel) run with the harness."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import timedelta

import pytest

from bsft_saga import publish
from bsft_saga.flows.graph import render
from bsft_saga.flows.registry import flow_registry
from bsft_saga.models import SagaInstance, SagaOutboxMessage
from bsft_saga.testing import SagaHarness
from tests.support.timer_fixtures import T0
from tests.testapp.branch_events import (
    InvoiceIssued,
    InvoicePaid,
    NoteAdded,
    OrderAccepted,
    ParcelPacked,
    PaymentAuthorised,
    PaymentReminderDue,
)
from tests.testapp.branch_flows import MAX_REMINDERS, DunningFlow, FulfilmentFlow

pytestmark = pytest.mark.django_db(transaction=True)


def reminders_sent() -> int:
    return SagaOutboxMessage.objects.filter(event_type="tests.payment-reminder-sent").count()


def test_a_reminder_meanwhile_keeps_the_step_and_moves_the_version() -> None:
    with SagaHarness(start=T0) as harness:
        harness.publish(InvoiceIssued("i-1"))
        before = harness.get_saga(DunningFlow, "i-1")
        harness.publish(PaymentReminderDue("i-1"))
        after = harness.get_saga(DunningFlow, "i-1")

    assert before is not None
    assert after is not None
    assert after.step_index == before.step_index == 1
    assert after.version == before.version + 1
    assert after.state["reminders"] == 1


def test_an_unpaid_invoice_is_reminded_five_times_then_canceled() -> None:
    with SagaHarness(start=T0) as harness:
        harness.publish(InvoiceIssued("i-2"))
        harness.advance_time(timedelta(days=60))
        state = harness.state(DunningFlow, "i-2")
        saga = harness.get_saga(DunningFlow, "i-2")

    assert (state.reminders, state.canceled, state.paid) == (MAX_REMINDERS, True, False)
    assert saga is not None
    assert saga.is_complete
    assert reminders_sent() == MAX_REMINDERS


def test_paying_ends_the_wait_and_cancels_the_reminder_the_meanwhile_body_scheduled() -> None:
    with SagaHarness(start=T0) as harness:
        harness.publish(InvoiceIssued("i-3"))
        harness.advance_time(timedelta(days=5))  # three business days: one reminder
        assert harness.state(DunningFlow, "i-3").reminders == 1
        harness.publish(InvoicePaid("i-3"))
        harness.advance_time(timedelta(days=60))
        state = harness.state(DunningFlow, "i-3")
        timers = list(harness.timeouts(DunningFlow, "i-3").values_list("outcome", flat=True))

    assert (state.reminders, state.paid, state.canceled) == (1, True, False)
    assert sorted(str(outcome) for outcome in timers) == ["canceled", "fired"]


def test_a_meanwhile_event_for_no_instance_starts_nothing() -> None:
    publish(PaymentReminderDue("i-4"))

    assert not SagaInstance.objects.filter(saga_type=DunningFlow.saga_type).exists()


def _svg_steps_naming(svg: str, text: str) -> list[int]:
    """The ``data-step`` of each step box of ``svg`` whose lines include ``text``."""
    namespace = "{http://www.w3.org/2000/svg}"
    return [
        int(box.get("data-step", "-1"))
        for box in ET.fromstring(svg).iter(f"{namespace}g")
        if "step" in box.get("class", "").split()
        and text in ["".join(line.itertext()) for line in box.iter(f"{namespace}text")]
    ]


@pytest.mark.parametrize("fmt", ["mermaid", "dot"])
def test_saga_graph_and_the_picture_draw_a_meanwhile_at_the_step_whose_wait_it_runs_during(
    fmt: str,
) -> None:
    # FulfilmentFlow hears NoteAdded meanwhile while it waits for ParcelDelivered (step 3),
    # the wait the engine runs it during: neither drawing may put it at step 2.
    definition = flow_registry.get(FulfilmentFlow)
    [waiting] = [step.index for step in definition.steps if step.meanwhile]
    label = "meanwhile NoteAdded: lambda"

    drawn = render([definition], fmt).splitlines()
    picture = render([definition], "svg")

    arrow = "-->" if fmt == "mermaid" else "->"
    loop = f"saga1_step{waiting} {arrow} saga1_step{waiting} "
    assert [line.strip().startswith(loop) for line in drawn if label in line] == [True]
    assert _svg_steps_naming(picture, label) == [waiting] == [3]


def test_a_meanwhile_runs_while_the_saga_waits_at_the_step_it_is_drawn_at() -> None:
    with SagaHarness(start=T0) as harness:
        harness.publish(OrderAccepted("o-1"))
        harness.publish(PaymentAuthorised("o-1"))
        harness.publish(ParcelPacked("o-1", parcel="p"))
        waiting = harness.get_saga(FulfilmentFlow, "o-1")
        harness.publish(NoteAdded("o-1", text="left at the door"))
        after = harness.get_saga(FulfilmentFlow, "o-1")

    assert waiting is not None
    assert after is not None
    assert (waiting.step_index, after.step_index) == (3, 3)
    assert "left at the door" in after.state["log"]


def test_saga_graph_marks_a_wait_that_keeps_early_events() -> None:
    assert "ParcelPacked (kept if early)" in render([flow_registry.get(FulfilmentFlow)], "mermaid")
