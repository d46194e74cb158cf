"""A kept event and the event that reaches its step, published at once from two threads,
each with its own connection (PostgreSQL or MariaDB): the kept event is applied exactly
once, after."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from bsft_saga import publish
from bsft_saga.models import SagaInboxEntry, SagaInstance, SagaKeptEvent
from tests.support.services import require_server_database
from tests.testapp.branch_events import OrderAccepted, ParcelPacked, PaymentAuthorised
from tests.testapp.branch_flows import FulfilmentFlow

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ROUNDS = 15


def race(order_id: str) -> None:
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def target(event: object) -> None:
        try:
            barrier.wait(timeout=30)
            publish(event)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [
        threading.Thread(target=target, args=(ParcelPacked(order_id),)),
        threading.Thread(target=target, args=(PaymentAuthorised(order_id),)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    if errors:
        raise errors[0]


def test_a_kept_event_racing_the_event_that_reaches_its_step_is_applied_once_in_order() -> None:
    require_server_database()
    for n in range(ROUNDS):
        order_id = f"race-{n}"
        publish(OrderAccepted(order_id))

        race(order_id)

        saga = SagaInstance.objects.get(
            saga_type=FulfilmentFlow.saga_type, correlation_key=order_id
        )
        assert saga.state["log"] == ["OrderAccepted", "PaymentAuthorised", "ParcelPacked"]
        assert saga.step_index == 3
        assert SagaInboxEntry.objects.filter(saga=saga).count() == 3
        assert not SagaKeptEvent.objects.filter(saga=saga).exists()
