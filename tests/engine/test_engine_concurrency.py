"""Events for one instance are serialised: real threads, real connections, a database server.

Each thread publishes through its own database connection, so the engine's version-checked
update and the partial unique constraint on active keys are what keeps the counts right.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from django.db import connection

from bsft_saga import publish
from bsft_saga.events import codec
from bsft_saga.models import SagaInboxEntry, SagaInstance
from tests.support.services import require_server_database
from tests.testapp.events import Tick
from tests.testapp.flows import CounterFlow, CounterState

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

THREADS = 8


def run_in_threads(work: Callable[[int], None]) -> None:
    """Run ``work(thread_number)`` in ``THREADS`` threads; re-raise the first failure."""
    errors: list[BaseException] = []

    def target(number: int) -> None:
        try:
            work(number)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=target, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "a publishing thread hung"
    if errors:
        raise errors[0]


# Runs on the default ENGINE.MAX_CONFLICT_RETRIES: publish must never raise because a
# concurrent transaction advanced the same instance (the caller could not tell whether its
# event was applied).
def test_concurrent_events_for_one_instance_are_each_applied_exactly_once() -> None:
    require_server_database()
    events = 400

    def work(number: int) -> None:
        for n in range(number, events, THREADS):
            publish(Tick("load", n=n))

    run_in_threads(work)

    row = SagaInstance.objects.get(saga_type=CounterFlow.saga_type, correlation_key="load")
    state = codec.decode(CounterState, row.state)
    assert state.count == events
    assert sorted(state.seen) == list(range(events))
    assert row.version == events  # the first Tick started the instance at version 1
    assert row.step_index == events
    assert SagaInboxEntry.objects.filter(saga=row).count() == events


def test_racing_start_events_create_exactly_one_instance() -> None:
    require_server_database()
    barrier = threading.Barrier(THREADS)

    def work(number: int) -> None:
        barrier.wait(timeout=30)
        publish(Tick("race", n=number))

    run_in_threads(work)

    [row] = SagaInstance.objects.filter(saga_type=CounterFlow.saga_type, correlation_key="race")
    state = codec.decode(CounterState, row.state)
    # Every later step of CounterFlow awaits Tick too: the losers of the start race are
    # applied to the winner's instance instead of being dropped.
    assert state.count == THREADS
    assert sorted(state.seen) == list(range(THREADS))
    assert row.version == THREADS
