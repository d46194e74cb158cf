"""In which order a saga step, plain receivers and the step's ``ctx.publish`` events run
(docs/guarantees.md, "Saga steps and plain receivers")."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import transaction

from bsft_saga import Envelope, publish
from bsft_saga.engine.receiver import connect_engine
from bsft_saga.models import SagaInstance
from bsft_saga.signals import event_published
from tests.testapp.events import OrderPlaced, ReserveStock
from tests.testapp.flows import OrderFlow

pytestmark = pytest.mark.django_db(transaction=True)

Receiver = Callable[..., None]


@pytest.fixture
def calls() -> Iterator[list[str]]:
    """Receivers of OrderPlaced around the engine: ``before`` is connected before it (an app
    listed before bsft_saga), ``after`` after it; ``staged`` receives the step's ReserveStock.

    Each records its name and whether the order's saga exists yet.
    """
    record: list[str] = []

    def named(name: str) -> Receiver:
        def receiver(sender: type, *, envelope: Envelope, **kwargs: Any) -> None:
            saga = SagaInstance.objects.filter(saga_type=OrderFlow.saga_type).exists()
            record.append(f"{name}:{'saga' if saga else 'no saga'}")

        return receiver

    saved = list(event_published.receivers)
    before, after, staged = named("before"), named("after"), named("staged")
    event_published.disconnect(dispatch_uid="bsft_saga.engine")
    event_published.connect(before, sender=OrderPlaced, weak=False)
    connect_engine()
    event_published.connect(after, sender=OrderPlaced, weak=False)
    event_published.connect(staged, sender=ReserveStock, weak=False)
    try:
        yield record
    finally:
        with event_published.lock:
            event_published.receivers = saved
            event_published.sender_receivers_cache.clear()


def test_receivers_run_in_connection_order_around_the_step(calls: list[str]) -> None:
    publish(OrderPlaced("o-1"))

    assert calls[0] == "before:no saga"  # connected before the engine: the step has not run
    assert calls[-1] == "after:saga"  # connected after it: the step has committed


def test_outside_a_transaction_the_steps_events_arrive_before_the_later_receivers(
    calls: list[str],
) -> None:
    publish(OrderPlaced("o-1"))

    assert calls == ["before:no saga", "staged:saga", "after:saga"]


def test_inside_a_transaction_the_steps_events_arrive_after_the_outermost_commit(
    calls: list[str],
) -> None:
    with transaction.atomic():
        publish(OrderPlaced("o-1"))
        assert calls == ["before:no saga", "after:saga"]

    assert calls == ["before:no saga", "after:saga", "staged:saga"]
