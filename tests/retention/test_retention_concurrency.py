"""A purge beside live traffic deletes nothing live: real threads, real connections.

Publishers start reminder sagas (each schedules a timer due at once, whose firing
completes the saga), advance counter sagas (active for good, one inbox row per event) and
defer events to the outbox, whose after-commit hand-off is lost so that the rows wait for
the drain. A dispatcher thread drains timers and outbox rows; a purge thread purges with
the most aggressive policy there is (a zero window, dead letters and audit records
included) in tiny batches, again and again. Whatever the interleaving, every timer fires,
every deferred event is delivered, and every active instance keeps all its inbox rows.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection

from bsft_saga import publish, tasks
from bsft_saga.draining import drain_round
from bsft_saga.events import codec
from bsft_saga.models import SagaInboxEntry, SagaInstance, SagaOutboxMessage, SagaTimeout
from bsft_saga.retention import purge_saga_data
from tests.testapp.events import Tick
from tests.testapp.flows import CounterFlow, CounterState
from tests.testapp.ops_events import Noted, ReminderDue, ReminderRequested
from tests.testapp.ops_flows import REMINDER_SAGA_TYPE
from tests.testapp.timer_flows import Recorder

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PUBLISHERS = 2
KEYS_PER_PUBLISHER = 15
TICKS = 3
# Bounds for a hang only: the work takes seconds; a busy shared machine may take longer.
JOIN_SECONDS = 240


@pytest.fixture
def lost_enqueues(monkeypatch: pytest.MonkeyPatch) -> None:
    """Deferred events' after-commit hand-off to Celery vanishes: the drain delivers them."""

    class _Vanishing:
        def delay(self, message_id: str) -> None:
            pass

    monkeypatch.setattr(tasks, "deliver_event", _Vanishing())


class Workers:
    """Threads that each run a loop on their own connection; the first failure is kept."""

    def __init__(self) -> None:
        self.errors: list[BaseException] = []
        self.threads: list[threading.Thread] = []

    def start(self, work: Callable[[], None]) -> None:
        def target() -> None:
            try:
                work()
            except BaseException as exc:
                self.errors.append(exc)
            finally:
                connection.close()

        thread = threading.Thread(target=target)
        self.threads.append(thread)
        thread.start()

    def join(self, threads: list[threading.Thread]) -> None:
        for thread in threads:
            thread.join(timeout=JOIN_SECONDS)
        assert not any(thread.is_alive() for thread in threads), "a worker thread hung"
        if self.errors:
            raise self.errors[0]


@pytest.fixture
def workers() -> Iterator[Workers]:
    pool = Workers()
    yield pool
    for thread in pool.threads:
        thread.join(timeout=JOIN_SECONDS)


def test_a_purge_beside_a_dispatcher_and_publishers_deletes_nothing_live(
    lost_enqueues: None, record: Callable[..., Recorder], workers: Workers
) -> None:
    fired = record(ReminderDue)
    delivered = record(Noted)
    deferred: list[Any] = []
    publishing_done = threading.Event()
    draining_done = threading.Event()
    purges: list[int] = []
    purged = threading.Condition()

    def wait_for_a_purge() -> None:
        # Overlap by construction, not by timing: a whole purge runs while this publisher
        # is halfway (the other publisher and the dispatcher still at work beside it).
        with purged:
            seen = len(purges)
            if not purged.wait_for(lambda: len(purges) > seen, timeout=JOIN_SECONDS):
                raise AssertionError("no purge finished while the publishers were halfway")

    def publisher(number: int) -> Callable[[], None]:
        def work() -> None:
            for i in range(KEYS_PER_PUBLISHER):
                if i == KEYS_PER_PUBLISHER // 2:
                    wait_for_a_purge()
                key = f"p{number}-{i}"
                publish(ReminderRequested(key, delay_seconds=0))
                for n in range(TICKS):
                    publish(Tick(key, n=n))
                deferred.append(publish(Noted(key), defer=True).message_id)

        return work

    def dispatcher() -> None:
        try:
            while True:
                finished = publishing_done.is_set()  # read before the pass that may be last
                report = drain_round(batch_size=5)
                if finished and not report.found_work:
                    break
        finally:
            draining_done.set()

    def purger() -> None:
        while not draining_done.is_set():
            report = purge_saga_data(
                older_than=timedelta(0),
                keep_dead_lettered=False,
                audit_older_than=timedelta(0),
                batch_size=7,
            )
            with purged:
                purges.append(report.instances)
                purged.notify_all()
            time.sleep(0.01)

    publishers = [publisher(number) for number in range(PUBLISHERS)]
    for work in (dispatcher, purger, *publishers):
        workers.start(work)
    try:
        workers.join(workers.threads[2:])  # the publishers
    finally:
        publishing_done.set()  # the dispatcher ends once nothing is left, then the purge
    workers.join(workers.threads[:2])

    keys = {f"p{number}-{i}" for number in range(PUBLISHERS) for i in range(KEYS_PER_PUBLISHER)}
    # Every timer fired: none was deleted pending, nor its saga while active.
    assert {event.key for event in fired.events} == keys
    # Every deferred event was delivered: no outbox row was deleted before it was.
    assert {envelope.message_id for envelope in delivered.envelopes} == set(deferred)
    assert not SagaTimeout.objects.pending().exists()
    assert not SagaOutboxMessage.objects.pending().exists()
    assert not SagaInstance.objects.active().filter(saga_type=REMINDER_SAGA_TYPE).exists()
    # Every active counter kept every inbox row: one per Tick, each applied once.
    counters = SagaInstance.objects.filter(saga_type=CounterFlow.saga_type)
    assert {counter.correlation_key for counter in counters} == keys
    for counter in counters:
        assert not counter.is_complete
        assert counter.step_index == TICKS
        assert SagaInboxEntry.objects.filter(saga=counter).count() == TICKS
        assert codec.decode(CounterState, counter.state).count == TICKS
    # What the purges beside the traffic left is what a quiet purge leaves.
    final = purge_saga_data(older_than=timedelta(0), keep_dead_lettered=False)
    assert sum(purges) + final.instances == len(keys)
    assert set(SagaInstance.objects.values_list("saga_type", flat=True)) == {CounterFlow.saga_type}
