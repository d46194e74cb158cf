"""A real Celery worker with embedded beat, over a real Redis, fires timers in real time.

The worker runs ``celery -A sample_project worker`` (the sample project's app, configured
from ``tests.settings`` with ``CELERY_TASK_ALWAYS_EAGER=0``) in a subprocess that shares the
test database. Nothing here moves the clock: a timer two poll intervals ahead fires because
beat ran ``drain_saga_timeouts`` after it came due. docs/celery.md describes this wiring.

tests/support/celery_workers.py starts the worker (and which Redis it uses).
"""

from __future__ import annotations

import re
import socket
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from bsft_saga import publish
from bsft_saga.conf import saga_settings
from bsft_saga.models import (
    SagaDispatcher,
    SagaInstance,
    SagaOutboxMessage,
    SagaTimeout,
    TimeoutOutcome,
)
from tests.support.celery_workers import BROKERS, Worker, enqueuing_to, wait_for
from tests.testapp.delayed_events import InvoiceIssued
from tests.testapp.delayed_flows import InvoiceFlow
from tests.testapp.events import TaskOpened
from tests.testapp.timer_flows import TaskFlow

pytestmark = [pytest.mark.celery, pytest.mark.slow]


def _task_saga(task_id: str) -> SagaInstance:
    return SagaInstance.objects.for_key(TaskFlow.saga_type, task_id).get()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("broker_url", BROKERS, indirect=True)
def test_worker_beat_fires_a_timer_two_poll_intervals_ahead_exactly_once(
    start_worker: Callable[..., Worker],
) -> None:
    worker = start_worker(beat=True)
    delay = round(2 * saga_settings.delivery.poll_interval.total_seconds())

    publish(TaskOpened("t-real-time", nudge_after_seconds=delay))
    nudge = SagaTimeout.objects.get(saga=_task_saga("t-real-time"), name="nudge")
    assert nudge.is_pending

    saga = wait_for(
        lambda: SagaInstance.objects.filter(pk=nudge.saga_id, step_index__gte=2).first(), worker
    )
    # Two more beat ticks after the one that fired it: neither may fire it again.
    worker.wait_for_more_drains()
    worker.stop()

    nudge.refresh_from_db()
    assert nudge.outcome == TimeoutOutcome.FIRED
    assert nudge.dispatched_at is not None
    assert nudge.dispatched_at >= nudge.due_at
    assert nudge.attempts == 0
    assert saga.step_index == 2
    assert saga.state["nudged"] == 1
    assert sum(result["fired"] for result in worker.drain_results()) == 1
    escalate = SagaTimeout.objects.get(saga=saga, name="escalate")
    assert escalate.is_pending


@pytest.mark.timeout(180)
def test_worker_delivers_a_deferred_event_through_deliver_event(
    start_worker: Callable[..., Worker], broker_url: str
) -> None:
    # No beat: the drain's outbox sweep cannot deliver the row; only deliver_event can.
    worker = start_worker(beat=False)

    with enqueuing_to(broker_url):
        envelope = publish(TaskOpened("t-deferred", nudge_after_seconds=3600), defer=True)

    def delivered() -> Any:
        return SagaOutboxMessage.objects.filter(
            pk=envelope.message_id, delivered_at__isnull=False
        ).first()

    wait_for(delivered, worker)
    assert _task_saga("t-deferred").step_index == 1
    task_line = re.compile(
        r"Task bsft_saga\.tasks\.deliver_event\[[^\]]+\] succeeded in [^:]+: 1\b"
    )
    wait_for(lambda: task_line.search(worker.log()), worker)


@pytest.mark.timeout(180)
def test_worker_beat_delivers_a_delayed_message_after_its_time_without_deliver_event(
    start_worker: Callable[..., Worker], broker_url: str
) -> None:
    worker = start_worker(beat=True)
    delay = timedelta(seconds=round(2 * saga_settings.delivery.poll_interval.total_seconds()))

    with enqueuing_to(broker_url):  # an enqueue at commit would reach this worker
        envelope = publish(InvoiceIssued("inv-celery"), delay=delay)
    row = SagaOutboxMessage.objects.get(pk=envelope.message_id)
    assert row.deliver_at is not None

    saga = wait_for(
        lambda: SagaInstance.objects.filter(
            saga_type=InvoiceFlow.saga_type, correlation_key="inv-celery"
        ).first(),
        worker,
    )
    worker.stop()

    row.refresh_from_db()
    assert row.delivered_at is not None
    assert saga.created_at >= row.deliver_at  # not one drain before its time
    assert not re.search(r"Task bsft_saga\.tasks\.deliver_event\[", worker.log())
    assert sum(result["delivered"] for result in worker.drain_results()) == 1


@pytest.mark.timeout(180)
@pytest.mark.parametrize("pool", ["solo", "prefork"])
def test_the_worker_running_the_drain_reports_as_a_celery_dispatcher_until_it_stops(
    start_worker: Callable[..., Worker], pool: str
) -> None:
    worker = start_worker(beat=True, pool=pool)

    row = wait_for(lambda: SagaDispatcher.objects.filter(kind="celery").first(), worker)
    assert row.host == socket.gethostname()
    # The worker itself, whichever process runs the task (a prefork pool child reports on
    # its worker's row).
    assert row.pid == worker.process.pid
    first = row.last_pass_at
    assert first is not None
    # Idle drains report too, at most once a second (REPORT_EVERY): wait for the next one.
    later = wait_for(
        lambda: SagaDispatcher.objects.filter(pk=row.pk, last_pass_at__gt=first).first(), worker
    )
    assert later.last_pass_at is not None
    assert later.last_pass_at > first
    assert SagaDispatcher.objects.count() == 1

    worker.stop()  # a warm shutdown: the process signs off
    assert not SagaDispatcher.objects.exists()
