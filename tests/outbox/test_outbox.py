"""The outbox: ``ctx.publish`` and ``publish(defer=True)`` are delivered at least once.

A row is delivered by the after-commit hook of the transaction that wrote it (a Celery task
for deferred events) and, when that delivery was lost, by ``outbox.deliver_pending()``,
which the drain task runs.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction
from django.test import override_settings
from freezegun import freeze_time

from bsft_saga import publish
from bsft_saga.models import SagaInstance, SagaOutboxMessage
from bsft_saga.outbox import deliver_pending
from tests.support.receivers import receiving
from tests.testapp.engine_events import Unrouted
from tests.testapp.events import OrderPlaced, ReserveStock
from tests.testapp.flows import OrderFlow

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)


@pytest.fixture
def eager_celery() -> Iterator[None]:
    """Run ``deliver_event`` in-process on whichever Celery app is current.

    tests/settings.py sets ``CELERY_TASK_ALWAYS_EAGER``, but only an app configured from the
    Django settings (the sample project's) reads it; Celery's default app, current unless
    another test installed that one, would try to reach a broker instead.
    """
    from celery import current_app

    conf = current_app.conf
    saved = (conf.task_always_eager, conf.task_eager_propagates)
    conf.task_always_eager = True
    conf.task_eager_propagates = True
    try:
        yield
    finally:
        conf.task_always_eager, conf.task_eager_propagates = saved


# --- publish(defer=True) --------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("eager_celery")
def test_a_deferred_event_is_written_in_the_transaction_and_delivered_after_commit() -> None:
    with receiving(Unrouted) as received:
        with transaction.atomic():
            envelope = publish(Unrouted("hand-off"), defer=True)
            row = SagaOutboxMessage.objects.get(pk=envelope.message_id)
            assert row.delivered_at is None
            assert received == []
        assert received == [envelope]
    row.refresh_from_db()
    assert row.delivered_at is not None


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("eager_celery")
def test_a_deferred_event_of_a_rolled_back_transaction_leaves_nothing() -> None:

    def hand_off_then_fail() -> None:
        with transaction.atomic():
            publish(Unrouted("hand-off"), defer=True)
            raise RuntimeError("the caller changed its mind")

    with receiving(Unrouted) as received, pytest.raises(RuntimeError):
        hand_off_then_fail()
    assert received == []
    assert not SagaOutboxMessage.objects.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("eager_celery")
def test_a_deferred_start_event_starts_its_saga_only_after_commit() -> None:
    with transaction.atomic():
        publish(OrderPlaced("o-1"), defer=True)
        assert not SagaInstance.objects.exists()
    assert SagaInstance.objects.for_key(OrderFlow.saga_type, "o-1").get().step_index == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("eager_celery")
def test_a_deferred_event_whose_enqueue_was_lost_is_delivered_by_the_drain(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from bsft_saga import tasks

    def broker_down(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("broker unreachable")

    monkeypatch.setattr(tasks.deliver_event, "delay", broker_down)
    with receiving(Unrouted) as received:
        envelope = publish(Unrouted("hand-off"), defer=True)
        assert received == []
        assert "could not enqueue delivery" in caplog.text
        result = tasks.drain_saga_timeouts()
        assert [e.message_id for e in received] == [envelope.message_id]
    assert result["delivered"] == 1


# --- what delivers a staged row -------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_failed_after_commit_delivery_does_not_fail_the_publisher_and_is_retried() -> None:
    with receiving(ReserveStock, fail=True) as received:
        publish(OrderPlaced("o-1"))  # the step commits; delivering ReserveStock fails
    assert len(received) == 1
    row = SagaOutboxMessage.objects.get()
    assert row.delivered_at is None
    assert row.attempts == 1
    assert "warehouse unreachable" in row.last_error
    assert row.next_attempt_at is not None
    with receiving(ReserveStock) as received_again:
        assert deliver_pending().delivered == 0  # not before its retry back-off
        assert deliver_pending(now=row.next_attempt_at).delivered == 1
    assert [e.message_id for e in received_again] == [row.pk]


@pytest.mark.django_db
def test_a_row_that_keeps_failing_is_dead_lettered_at_max_dispatch_attempts() -> None:
    publish(OrderPlaced("o-1"))  # not delivered: this test's transaction never commits
    with (
        override_settings(BSFT_SAGA={"DELIVERY": {"MAX_DISPATCH_ATTEMPTS": 2}}),
        receiving(ReserveStock, fail=True) as received,
    ):
        assert deliver_pending().failed == 1
        retry_at = SagaOutboxMessage.objects.get().next_attempt_at
        assert deliver_pending(now=retry_at).dead_lettered == 1
        assert deliver_pending(now=retry_at).delivered == 0
    assert len(received) == 2
    row = SagaOutboxMessage.objects.get()
    assert row.dead_lettered_at is not None
    assert row.delivered_at is None
    assert row.attempts == 2


@pytest.mark.django_db
def test_one_unreadable_row_does_not_stop_the_delivery_of_the_others() -> None:
    SagaOutboxMessage.objects.create(
        event_type="tests.orders.renamed-away", payload={}, created_at=NOW
    )
    with receiving(Unrouted) as received:
        publish(Unrouted("good"), defer=True)
        report = deliver_pending()
    assert (report.delivered, report.failed) == (1, 1)
    assert [e.event for e in received] == [Unrouted("good")]
    bad = SagaOutboxMessage.objects.get(event_type="tests.orders.renamed-away")
    assert "UnknownEventType" in bad.last_error
    assert "tests.orders.renamed-away" in bad.last_error


@pytest.mark.django_db
def test_a_row_claimed_by_a_deliverer_that_died_is_delivered_once_its_lease_expires() -> None:
    lease = timedelta(minutes=5)
    with freeze_time(NOW):
        envelope = publish(Unrouted("hand-off"), defer=True)
        SagaOutboxMessage.objects.filter(pk=envelope.message_id).update(claimed_until=NOW + lease)
    with receiving(Unrouted) as received:
        with freeze_time(NOW + lease - timedelta(seconds=1)):
            assert deliver_pending().delivered == 0
        with freeze_time(NOW + lease + timedelta(seconds=1)):
            assert deliver_pending().delivered == 1
    assert [e.message_id for e in received] == [envelope.message_id]


# --- a crash between the commit and the delivery --------------------------------------


@pytest.mark.slow
def test_an_event_staged_by_a_step_is_delivered_after_the_process_died_before_delivery(
    subprocess_env: dict[str, str], python: str
) -> None:
    child = subprocess.Popen(
        [python, "-m", "tests.workers.engine_publish_then_die", "crash-1"],
        env=subprocess_env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _, stderr = child.communicate(timeout=120)
    assert child.returncode == -signal.SIGKILL, stderr

    saga = SagaInstance.objects.get(saga_type=OrderFlow.saga_type, correlation_key="crash-1")
    assert (saga.step_index, saga.version) == (1, 1)
    row = SagaOutboxMessage.objects.get(saga=saga)
    assert row.event_type == "tests.stock.reserve"
    assert row.delivered_at is None

    with receiving(ReserveStock) as received:
        assert deliver_pending().delivered == 1
        assert deliver_pending().delivered == 0
    assert [(e.message_id, e.event) for e in received] == [(row.pk, ReserveStock("crash-1"))]
    row.refresh_from_db()
    assert row.delivered_at is not None
