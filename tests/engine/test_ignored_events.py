"""An event no instance takes leaves a trace: the counter ``bsft.saga.event.ignored`` with
its ``reason`` and a DEBUG log line naming flow, key, step and reason, so that "why didn't
my saga advance?" has an answer.
"""

from __future__ import annotations

import logging
import uuid

import pytest

from bsft_saga import publish
from tests.support import telemetry as telemetry_fixtures
from tests.testapp.events import OrderPlaced, OrderShipped, StockReserved
from tests.testapp.flows import OrderFlow

pytestmark = pytest.mark.django_db

IGNORED = "bsft.saga.event.ignored"


def _ignored(reason: str) -> int:
    otel = telemetry_fixtures.install()
    return otel.counter_value(IGNORED, **{"saga.type": OrderFlow.saga_type, "reason": reason})


@pytest.fixture
def order_id() -> str:
    return f"o-{uuid.uuid4().hex[:8]}"


def test_an_event_for_a_key_without_an_instance_is_counted_as_no_instance(order_id: str) -> None:
    before = _ignored("no_instance")

    publish(StockReserved(order_id))

    assert _ignored("no_instance") - before == 1


def test_an_event_the_current_step_does_not_await_is_counted_as_not_awaited(
    order_id: str,
) -> None:
    publish(OrderPlaced(order_id))
    before = _ignored("not_awaited")

    publish(OrderShipped(order_id))  # the order waits for StockReserved first
    publish(OrderPlaced(order_id))  # a second start event for an active key

    assert _ignored("not_awaited") - before == 2


def test_a_message_the_instance_already_handled_is_counted_as_duplicate(order_id: str) -> None:
    publish(OrderPlaced(order_id))
    envelope = publish(StockReserved(order_id))
    before = _ignored("duplicate")

    publish(StockReserved(order_id), message_id=envelope.message_id)

    assert _ignored("duplicate") - before == 1


def test_a_redelivered_start_event_of_a_finished_instance_is_a_duplicate(order_id: str) -> None:
    start = publish(OrderPlaced(order_id))
    publish(StockReserved(order_id))
    publish(OrderShipped(order_id))  # completes
    before = _ignored("duplicate")

    publish(OrderPlaced(order_id), message_id=start.message_id)

    assert _ignored("duplicate") - before == 1


def test_an_ignored_event_is_logged_at_debug_with_flow_key_step_and_reason(
    order_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    publish(OrderPlaced(order_id))

    with caplog.at_level(logging.DEBUG, logger="bsft_saga.engine.handler"):
        publish(OrderShipped(order_id))

    [line] = [r.getMessage() for r in caplog.records if "ignored" in r.getMessage()]
    assert "tests.order.shipped" in line
    assert f"flow {OrderFlow.__module__}.{OrderFlow.__qualname__} ('tests.order')" in line
    assert f"key '{order_id}', step 1: not_awaited" in line
