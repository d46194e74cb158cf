"""A ``publish`` with no correlation id and none ambient gets a fresh one, which its steps,
their timers and the events they publish carry."""

from __future__ import annotations

from typing import Any

import pytest

from bsft_saga import publish
from bsft_saga.correlation import MAX_LENGTH, correlation_scope, is_valid_correlation_id
from bsft_saga.models import SagaOutboxMessage, SagaTimeout
from bsft_saga.testing import SagaHarness
from tests.support.timer_fixtures import T0
from tests.testapp.engine_events import ReminderDue, ReminderRequested
from tests.testapp.events import OrderPlaced, ReserveStock
from tests.testapp.flows import REMINDER_DELAY, ReminderFlow


@pytest.mark.django_db
def test_each_publish_without_an_id_gets_a_fresh_valid_one_of_its_own() -> None:
    one = publish(ReminderDue("nobody-1"))
    two = publish(ReminderDue("nobody-2"))

    assert one.correlation_id is not None
    assert two.correlation_id is not None
    assert one.correlation_id != two.correlation_id
    assert is_valid_correlation_id(one.correlation_id)
    assert len(one.correlation_id) <= MAX_LENGTH


@pytest.mark.django_db
def test_a_given_or_ambient_id_is_kept() -> None:
    assert publish(ReminderDue("x"), correlation_id="given").correlation_id == "given"
    with correlation_scope("ambient"):
        assert publish(ReminderDue("y")).correlation_id == "ambient"


@pytest.mark.django_db(transaction=True)
def test_the_events_a_step_publishes_carry_the_fresh_id(record: Any) -> None:
    recorder = record(ReserveStock)

    envelope = publish(OrderPlaced("o-fresh"))

    [row] = SagaOutboxMessage.objects.filter(event_type="tests.stock.reserve")
    assert row.correlation_id == envelope.correlation_id
    assert [e.correlation_id for e in recorder.envelopes] == [envelope.correlation_id]


@pytest.mark.django_db(transaction=True)
def test_timers_scheduled_by_its_steps_store_it_and_fire_under_it(record: Any) -> None:
    recorder = record(ReminderDue)
    with SagaHarness(start=T0) as harness:
        envelope = harness.publish(ReminderRequested("r-fresh"))
        [timer] = harness.timeouts(ReminderFlow, "r-fresh")
        harness.advance_time(REMINDER_DELAY)

    assert timer.correlation_id == envelope.correlation_id
    assert [e.correlation_id for e in recorder.envelopes] == [envelope.correlation_id]
    assert SagaTimeout.objects.get(pk=timer.pk).outcome == "fired"


@pytest.mark.django_db
def test_a_deferred_event_stores_its_fresh_id_in_the_outbox() -> None:
    envelope = publish(ReminderDue("deferred"), defer=True)

    assert SagaOutboxMessage.objects.get(pk=envelope.message_id).correlation_id == (
        envelope.correlation_id
    )
