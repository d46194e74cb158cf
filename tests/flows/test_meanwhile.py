"""``.meanwhile(E, body)``: while a step waits, ``E`` runs ``body`` without moving the saga
on; the docs' dunning flow (remind every three business days until paid, five times at
most, then cancel) run with the harness."""

from __future__ import annotations

from datetime import timedelta

import pytest

from bsft_saga import publish
from bsft_saga.flows.graph import render
from bsft_saga.flows.registry import flow_registry
from bsft_saga.models import SagaInstance, SagaOutboxMessage
from bsft_saga.testing import SagaHarness
from tests.support.timer_fixtures import T0
from tests.testapp.branch_events import InvoiceIssued, InvoicePaid, PaymentReminderDue
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


@pytest.mark.parametrize("fmt", ["mermaid", "dot"])
def test_saga_graph_draws_the_meanwhile_loop_on_the_waiting_step(fmt: str) -> None:
    drawn = render([flow_registry.get(DunningFlow)], fmt)

    assert "meanwhile PaymentReminderDue: _remind" in drawn
    loop = "step0 --> " if fmt == "mermaid" else "step0 -> "
    assert any(loop in line and "meanwhile" in line for line in drawn.splitlines())


def test_saga_graph_marks_a_wait_that_keeps_early_events() -> None:
    assert "ParcelPacked (kept if early)" in render([flow_registry.get(FulfilmentFlow)], "mermaid")
