"""The Celery tasks, run in-process: ``drain_saga_timeouts``, ``deliver_event``, and the
W002 check on the beat schedule (docs/celery.md).

The Celery app is the sample project's (``sample_project/celery.py``), configured from
``tests.settings``, whose ``CELERY_TASK_ALWAYS_EAGER`` runs tasks in the calling thread. The
same tasks in a real worker, over Redis, are tests/processes/test_celery_worker.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from celery import Celery, current_app
from celery.signals import task_prerun
from django.core.checks import run_checks
from django.db import transaction
from freezegun import freeze_time
from kombu.exceptions import OperationalError

from bsft_saga import publish, tasks
from bsft_saga.checks import check_beat_schedule
from bsft_saga.correlation import correlation_scope
from bsft_saga.models import SagaInstance, SagaOutboxMessage, SagaTimeout, TimeoutOutcome
from bsft_saga.tasks import deliver_event, drain_saga_timeouts
from sample_project.celery import app as sample_celery_app
from tests.testapp.events import TaskOpened
from tests.testapp.timer_flows import TaskFlow

T0 = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)


@pytest.fixture(autouse=True)
def celery_app() -> Celery:
    """The sample project's app, current, and eager as tests/settings.py configures it."""
    sample_celery_app.set_current()
    assert sample_celery_app.conf.task_always_eager, "tests.settings runs Celery eagerly"
    return sample_celery_app


@pytest.fixture
def lost_enqueues(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Enqueues that vanish (the web process died between its commit and the broker)."""
    lost: list[str] = []

    class _Vanishing:
        def delay(self, message_id: str) -> None:
            lost.append(message_id)

    monkeypatch.setattr(tasks, "deliver_event", _Vanishing())
    return lost


@contextmanager
def tasks_run() -> Iterator[list[str]]:
    """Collect the names of the Celery tasks that start while the block runs."""
    names: list[str] = []

    def on_prerun(sender: Any = None, **kwargs: Any) -> None:
        names.append(sender.name)

    task_prerun.connect(on_prerun, weak=False)
    try:
        yield names
    finally:
        task_prerun.disconnect(on_prerun)


def task_saga(task_id: str) -> SagaInstance | None:
    return SagaInstance.objects.for_key(TaskFlow.saga_type, task_id).first()


# --- drain_saga_timeouts --------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_drain_task_fires_due_timers_and_delivers_pending_outbox_rows(
    lost_enqueues: list[str],
) -> None:
    with freeze_time(T0) as frozen:
        publish(TaskOpened("t-due", nudge_after_seconds=60))
        deferred = publish(TaskOpened("t-deferred"), defer=True)
        assert lost_enqueues == [str(deferred.message_id)]
        frozen.move_to(T0 + timedelta(seconds=60))

        result = drain_saga_timeouts()

    assert result == {
        "fired": 1,
        "missed": 0,
        "failed": 0,
        "dead_lettered": 0,
        "unclaimed": 0,
        "delivered": 1,
    }
    nudge = SagaTimeout.objects.get(saga=task_saga("t-due"), name="nudge")
    assert nudge.outcome == TimeoutOutcome.FIRED
    assert SagaOutboxMessage.objects.get(pk=deferred.message_id).delivered_at is not None
    started = task_saga("t-deferred")
    assert started is not None
    assert started.step_index == 1


@pytest.mark.django_db(transaction=True)
def test_drain_task_with_nothing_due_reports_zeros() -> None:
    with freeze_time(T0):
        publish(TaskOpened("t-later", nudge_after_seconds=60))
        result = drain_saga_timeouts()

    assert set(result.values()) == {0}
    assert SagaTimeout.objects.pending().filter(name="nudge").count() == 1


# --- deliver_event --------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_deliver_event_publishes_an_outbox_row_once(lost_enqueues: list[str]) -> None:
    envelope = publish(TaskOpened("t-1"), defer=True)
    assert task_saga("t-1") is None

    first = deliver_event(str(envelope.message_id))
    delivered_at = SagaOutboxMessage.objects.get(pk=envelope.message_id).delivered_at
    second = deliver_event(str(envelope.message_id))

    assert (first, second) == (1, 0)
    assert SagaInstance.objects.for_key(TaskFlow.saga_type, "t-1").count() == 1
    row = SagaOutboxMessage.objects.get(pk=envelope.message_id)
    assert row.delivered_at == delivered_at is not None
    assert row.attempts == 0


@pytest.mark.django_db(transaction=True)
def test_deliver_event_publishes_under_the_correlation_id_of_the_deferring_code(
    lost_enqueues: list[str],
) -> None:
    with correlation_scope("req-42"):
        envelope = publish(TaskOpened("t-1"), defer=True)

    deliver_event(str(envelope.message_id))

    # The started saga scheduled its timers under the envelope's correlation id.
    assert {t.correlation_id for t in SagaTimeout.objects.filter(saga=task_saga("t-1"))} == {
        "req-42"
    }


@pytest.mark.django_db(transaction=True)
def test_deferred_publish_runs_deliver_event_only_after_commit() -> None:
    with tasks_run() as started:
        with transaction.atomic():
            envelope = publish(TaskOpened("t-1"), defer=True)
            assert started == []
            assert task_saga("t-1") is None
        assert started == ["bsft_saga.tasks.deliver_event"]

    saga = task_saga("t-1")
    assert saga is not None
    assert saga.step_index == 1
    assert SagaOutboxMessage.objects.get(pk=envelope.message_id).delivered_at is not None


@pytest.mark.django_db(transaction=True)
def test_a_failed_enqueue_leaves_the_row_pending_for_the_drain_task(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broker_down(*args: Any, **kwargs: Any) -> None:
        raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(deliver_event, "delay", broker_down)

    envelope = publish(TaskOpened("t-1"), defer=True)

    assert "could not enqueue delivery" in caplog.text
    row = SagaOutboxMessage.objects.get(pk=envelope.message_id)
    assert (row.delivered_at, row.attempts) == (None, 0)
    assert task_saga("t-1") is None

    assert drain_saga_timeouts()["delivered"] == 1
    assert task_saga("t-1") is not None


@pytest.mark.parametrize("task", [drain_saga_timeouts, deliver_event], ids=lambda t: t.name)
def test_a_task_whose_worker_dies_goes_back_to_the_broker(task: Any) -> None:
    # Acknowledged after the run, and requeued (not acknowledged) when the worker process
    # running it is lost: tests/processes/test_celery_faults.py kills real workers.
    assert task.acks_late is True
    assert task.reject_on_worker_lost is True


# --- the beat schedule check ----------------------------------------------------------


@contextmanager
def beat_schedule(schedule: dict[str, Any]) -> Iterator[None]:
    conf = current_app.conf
    saved = conf.beat_schedule
    conf.beat_schedule = schedule
    try:
        yield
    finally:
        conf.beat_schedule = saved


def test_a_beat_schedule_without_the_drain_task_is_warning_w002() -> None:
    with beat_schedule({"nightly-report": {"task": "reports.tasks.nightly", "schedule": 86400}}):
        messages = check_beat_schedule()
        registered = {message.id for message in run_checks()}

    assert [message.id for message in messages] == ["bsft_saga.W002"]
    assert "bsft_saga.tasks.drain_saga_timeouts" in messages[0].msg
    assert "bsft_saga.W002" in registered


def test_a_beat_schedule_with_the_drain_task_passes_the_check() -> None:
    entry = {"task": "bsft_saga.tasks.drain_saga_timeouts", "schedule": 5}
    with beat_schedule({"nightly-report": {"task": "reports.tasks.nightly"}, "drain": entry}):
        assert check_beat_schedule() == []
