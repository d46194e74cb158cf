"""``apublish``: publishing from async code, such as an ASGI view under ``AsyncClient``.

This module is also the URLconf of its view tests (``ROOT_URLCONF="tests.test_publishing"``).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.core.exceptions import SynchronousOnlyOperation
from django.http import HttpRequest, JsonResponse
from django.test import AsyncClient, override_settings
from django.urls import path

from bsft_saga import Envelope, apublish, publish
from bsft_saga.models import SagaInstance, SagaOutboxMessage
from tests.testapp.events import OrderPlaced
from tests.testapp.flows import OrderFlow
from tests.testapp.timer_events import ProbeStarted
from tests.testapp.timer_flows import ProbeFlow

pytestmark = pytest.mark.django_db


async def place_order(request: HttpRequest, order_id: str) -> JsonResponse:
    envelope = await apublish(OrderPlaced(order_id))
    return JsonResponse(
        {"message_id": str(envelope.message_id), "correlation_id": envelope.correlation_id}
    )


urlpatterns = [path("orders/<str:order_id>/", place_order)]


@override_settings(ROOT_URLCONF="tests.test_publishing")
def test_an_async_view_publishes_and_the_step_runs_before_the_response() -> None:
    response = async_to_sync(AsyncClient().post)(
        "/orders/o-async/", headers={"X-Correlation-ID": "req-async-1"}
    )

    assert response.status_code == 200
    assert response.json()["correlation_id"] == "req-async-1"
    saga = SagaInstance.objects.get(saga_type=OrderFlow.saga_type, correlation_key="o-async")
    assert saga.step_index == 1
    assert saga.inbox_entries.get().message_id.hex == response.json()["message_id"].replace("-", "")


def test_apublish_returns_the_same_envelope_publish_would() -> None:
    envelope = async_to_sync(apublish)(OrderPlaced("o-env"), correlation_id="given")

    assert isinstance(envelope, Envelope)
    assert (envelope.event, envelope.event_type, envelope.correlation_id) == (
        OrderPlaced("o-env"),
        "tests.order.placed",
        "given",
    )


def test_the_steps_run_off_the_event_loop_in_the_callers_sync_thread(action: Any) -> None:
    seen: dict[str, Any] = {}

    def body(ctx: Any, e: Any) -> None:
        seen["thread"] = threading.get_ident()
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            seen["loop"] = None
        else:
            seen["loop"] = "running"

    async def caller() -> None:
        seen["caller_thread"] = threading.get_ident()
        await apublish(ProbeStarted("p-async", action=action(body)))

    async_to_sync(caller)()

    assert seen["loop"] is None
    assert seen["thread"] == threading.get_ident()  # thread-sensitive: the outer sync thread
    assert seen["thread"] != seen["caller_thread"]  # ... not the event loop's
    assert SagaInstance.objects.filter(saga_type=ProbeFlow.saga_type).exists()


def test_apublish_defers_like_publish() -> None:
    envelope = async_to_sync(apublish)(OrderPlaced("o-deferred"), defer=True)

    row = SagaOutboxMessage.objects.get(pk=envelope.message_id)
    assert row.event_type == "tests.order.placed"


def test_apublish_carries_the_ambient_correlation_id_into_the_executor() -> None:
    from bsft_saga.correlation import correlation_scope

    async def caller() -> Envelope:
        with correlation_scope("ambient-async"):
            return await apublish(OrderPlaced("o-ambient"))

    assert async_to_sync(caller)().correlation_id == "ambient-async"


def test_plain_publish_from_async_code_is_refused_by_django() -> None:
    async def caller() -> None:
        publish(OrderPlaced("o-refused"))

    with pytest.raises(SynchronousOnlyOperation):
        async_to_sync(caller)()
