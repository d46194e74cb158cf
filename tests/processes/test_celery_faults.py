"""A Celery worker SIGKILLed inside bsft_saga's tasks: the event still arrives, and once.

Each test starts a real worker (tests/support/celery_workers.py) with
``DJANGO_SETTINGS_MODULE=tests.workers.celery_crash.settings``: the test settings plus a
receiver that SIGKILLs the worker the first time it sees one event type inside one task
(tests/workers/celery_crash/receivers.py). It runs after the saga's own receiver, so the
process dies with the event's step applied in the delivery's transaction, uncommitted; a
marker file lets the event through on every later call.

Two ways to die, for each of the two tasks:

- **a prefork pool child** (``--pool=prefork --concurrency=1``): the worker's parent sees
  its child lost; ``acks_late`` + ``reject_on_worker_lost`` (set on both tasks in
  bsft_saga/tasks.py) make it requeue the message rather than acknowledge it, and a new
  child takes it again. A rerun within the dead child's lease (``CLAIM_LEASE``) finds the
  row still claimed and leaves it; the drain claims it again once the lease has run out.
  (billiard sometimes notices the lost child only seconds later, past the lease: then the
  rerun delivers it, and the tests accept either, as long as exactly one does.)
- **the whole worker** (its process group: parent, pool, embedded beat), then a new worker:
  the message the dead worker took stays unacknowledged in Redis until the transport's
  ``visibility_timeout``, which the tests set to an hour explicitly (Kombu's default), so
  what delivers the event is the new worker's drain, after ``CLAIM_LEASE``.

``CLAIM_LEASE`` is shortened to a few seconds through ``BSFT_SAGA_DELIVERY_JSON``;
``POLL_INTERVAL`` is tests/settings.py's one second. docs/celery.md ("When a worker dies")
describes the same settings.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from bsft_saga import publish
from bsft_saga.events.registry import event_type_of
from bsft_saga.models import (
    SagaInboxEntry,
    SagaInstance,
    SagaOutboxMessage,
    SagaTimeout,
    TimeoutOutcome,
)
from bsft_saga.tasks import DRAIN_TASK, deliver_event
from tests.support.celery_workers import BROKERS, Worker, enqueuing_to, wait_for
from tests.testapp.events import NudgeDue, TaskOpened
from tests.testapp.timer_flows import TaskFlow
from tests.workers.celery_crash.receivers import KILLED, SEEN

pytestmark = [pytest.mark.celery, pytest.mark.slow]

DELIVER_TASK = deliver_event.name
LEASE_SECONDS = 4
#: The Redis transport's visibility_timeout the workers run with: Kombu's default, spelled
#: out so that no test relies on a message the dead worker took coming back.
VISIBILITY_TIMEOUT_SECONDS = 3600
#: Kombu's Redis transport keeps each delivered, unacknowledged message in this hash.
UNACKED_KEY = "unacked"


@dataclass(frozen=True)
class CrashPlan:
    """Where the crashing receiver reports, and the worker environment that arms it."""

    directory: Path

    def env(self, *, event: type, task: str, kill: str) -> dict[str, str]:
        return {
            "DJANGO_SETTINGS_MODULE": "tests.workers.celery_crash.settings",
            "BSFT_SAGA_DELIVERY_JSON": json.dumps({"CLAIM_LEASE": LEASE_SECONDS}),
            "BSFT_SAGA_VISIBILITY_TIMEOUT": str(VISIBILITY_TIMEOUT_SECONDS),
            "BSFT_SAGA_CRASH_EVENT": event_type_of(event),
            "BSFT_SAGA_CRASH_TASK": task,
            "BSFT_SAGA_CRASH_KILL": kill,
            "BSFT_SAGA_CRASH_DIR": str(self.directory),
        }

    def killed(self) -> dict[str, Any] | None:
        """The call the receiver died in, once it has."""
        path = self.directory / KILLED
        text = path.read_text() if path.exists() else ""
        return json.loads(text) if text else None

    def seen(self, message_id: uuid.UUID) -> list[dict[str, Any]]:
        """Every call of the receiver with the event of ``message_id``, killed ones too."""
        path = self.directory / SEEN
        calls = [json.loads(line) for line in path.read_text().splitlines()]
        return [call for call in calls if call["message_id"] == str(message_id)]


@pytest.fixture
def crash(tmp_path: Path) -> CrashPlan:
    directory = tmp_path / "crash"
    directory.mkdir()
    return CrashPlan(directory)


def _task_saga(task_id: str) -> SagaInstance:
    return SagaInstance.objects.for_key(TaskFlow.saga_type, task_id).get()


def _succeeded_with(worker: Worker, task: str, task_id: str) -> list[int]:
    """What each run of ``task_id`` returned (integer results only)."""
    line = rf"Task {re.escape(task)}\[{re.escape(task_id)}\] succeeded in [^:]+: (\d+)"
    return [int(result) for result in re.findall(line, worker.log())]


def _unacked_messages(broker_url: str) -> int:
    client = redis.Redis.from_url(broker_url)
    try:
        return int(client.hlen(UNACKED_KEY))
    finally:
        client.close()


def _delivered(message_id: uuid.UUID) -> Callable[[], SagaOutboxMessage | None]:
    def probe() -> SagaOutboxMessage | None:
        return SagaOutboxMessage.objects.filter(pk=message_id, delivered_at__isnull=False).first()

    return probe


def _total(worker: Worker, key: str) -> Callable[[], int | None]:
    """A probe: the sum of ``key`` over the worker's logged drain results, once not 0.

    The log line of a drain comes after its commit: a test that saw the commit waits for it.
    """

    def probe() -> int | None:
        return sum(result[key] for result in worker.drain_results()) or None

    return probe


def _assert_started_once(task_id: str, message_id: uuid.UUID) -> None:
    """The deferred ``TaskOpened`` reached its saga once: one saga, one inbox row, step 1."""
    saga = _task_saga(task_id)
    assert saga.step_index == 1
    assert SagaInboxEntry.objects.filter(message_id=message_id).count() == 1
    assert SagaTimeout.objects.filter(saga=saga, name="nudge").count() == 1


def _assert_nudged_once(saga: SagaInstance) -> None:
    """The nudge timer fired once and its step ran once: in the state, the inbox, the row."""
    saga.refresh_from_db()
    nudge = SagaTimeout.objects.get(saga=saga, name="nudge")
    assert nudge.outcome == TimeoutOutcome.FIRED
    assert saga.step_index == 2
    assert saga.state["nudged"] == 1
    assert SagaInboxEntry.objects.filter(saga=saga, message_id=nudge.message_id).count() == 1


@pytest.mark.timeout(120)
@pytest.mark.parametrize("broker_url", BROKERS, indirect=True)
def test_a_pool_child_killed_in_deliver_event_is_replaced_and_the_event_arrives_once(
    start_worker: Callable[..., Worker],
    start_beat: Callable[..., Worker],
    broker_url: str,
    crash: CrashPlan,
) -> None:
    env = crash.env(event=TaskOpened, task=DELIVER_TASK, kill="process")
    # No beat yet: until the rerun has been seen, only deliver_event can deliver the row.
    worker = start_worker(beat=False, pool="prefork", env=env)
    with enqueuing_to(broker_url):
        envelope = publish(TaskOpened("t-child-deliver"), defer=True)

    killed = wait_for(crash.killed, worker)
    assert killed["task"] == DELIVER_TASK
    # reject_on_worker_lost: the parent requeued the message, and a new child ran it.
    wait_for(lambda: _succeeded_with(worker, DELIVER_TASK, killed["task_id"]) or None, worker)
    assert worker.received(killed["task_id"]) == 2

    # Within the dead child's lease the rerun leaves the row (it returns 0) and the drain
    # delivers it once the lease has run out; a parent that noticed its lost child only
    # after the lease (billiard may take seconds) has the rerun deliver it (1).
    start_beat(env=env)
    wait_for(_delivered(envelope.message_id), worker)
    # Two more drains after that: the one that delivered it has logged, none delivers again.
    worker.wait_for_more_drains()
    [rerun] = _succeeded_with(worker, DELIVER_TASK, killed["task_id"])
    assert rerun + sum(result["delivered"] for result in worker.drain_results()) == 1
    _assert_started_once("t-child-deliver", envelope.message_id)
    seen = crash.seen(envelope.message_id)
    assert len(seen) == 2
    assert seen[1]["task"] == (DELIVER_TASK if rerun else DRAIN_TASK)
    assert seen[1]["pid"] != killed["pid"]


@pytest.mark.timeout(120)
def test_a_worker_killed_in_deliver_event_leaves_the_event_to_the_next_workers_drain(
    start_worker: Callable[..., Worker], broker_url: str, crash: CrashPlan
) -> None:
    env = crash.env(event=TaskOpened, task=DELIVER_TASK, kill="worker")
    first = start_worker(beat=False, env=env)
    with enqueuing_to(broker_url):
        envelope = publish(TaskOpened("t-worker-deliver"), defer=True)

    assert first.wait_exited() == -9
    killed = crash.killed()
    assert killed is not None
    assert killed["task"] == DELIVER_TASK
    assert SagaOutboxMessage.objects.get(pk=envelope.message_id).delivered_at is None
    # acks_late: the message the worker died with was never acknowledged.
    assert _unacked_messages(broker_url) == 1

    second = start_worker(beat=True, env=env)
    wait_for(_delivered(envelope.message_id), second)
    assert wait_for(_total(second, "delivered"), second) == 1
    # The broker has not handed the message back (visibility_timeout): the drain delivered it.
    assert second.received(killed["task_id"]) == 0
    assert _unacked_messages(broker_url) == 1
    _assert_started_once("t-worker-deliver", envelope.message_id)
    seen = crash.seen(envelope.message_id)
    assert [call["task"] for call in seen] == [DELIVER_TASK, DRAIN_TASK]


@pytest.mark.timeout(120)
def test_a_pool_child_killed_in_the_drain_is_replaced_and_the_timer_fires_once(
    start_worker: Callable[..., Worker], crash: CrashPlan
) -> None:
    worker = start_worker(
        beat=True, pool="prefork", env=crash.env(event=NudgeDue, task=DRAIN_TASK, kill="process")
    )
    publish(TaskOpened("t-child-drain", nudge_after_seconds=1))
    saga = _task_saga("t-child-drain")

    killed = wait_for(crash.killed, worker)
    assert killed["task"] == DRAIN_TASK
    # reject_on_worker_lost: the parent requeued the drain, and a new child ran it.
    wait_for(lambda: worker.received(killed["task_id"]) == 2 or None, worker)
    wait_for(lambda: SagaInstance.objects.filter(pk=saga.pk, step_index=2).first(), worker)
    # Two more drains after the one that fired it: neither may fire it again.
    worker.wait_for_more_drains()

    _assert_nudged_once(saga)
    assert sum(result["fired"] for result in worker.drain_results()) == 1
    nudge = SagaTimeout.objects.get(saga=saga, name="nudge")
    assert killed["message_id"] == str(nudge.message_id)
    assert len(crash.seen(nudge.message_id)) == 2


@pytest.mark.timeout(120)
def test_a_worker_killed_in_the_drain_fires_the_timer_once_after_a_restart(
    start_worker: Callable[..., Worker], crash: CrashPlan
) -> None:
    env = crash.env(event=NudgeDue, task=DRAIN_TASK, kill="worker")
    first = start_worker(beat=True, env=env)
    publish(TaskOpened("t-worker-drain", nudge_after_seconds=1))
    saga = _task_saga("t-worker-drain")

    assert first.wait_exited() == -9
    killed = crash.killed()
    assert killed is not None
    assert killed["task"] == DRAIN_TASK
    saga.refresh_from_db()
    assert saga.step_index == 1

    second = start_worker(beat=True, env=env)
    wait_for(lambda: SagaInstance.objects.filter(pk=saga.pk, step_index=2).first(), second)
    second.wait_for_more_drains()

    _assert_nudged_once(saga)
    assert sum(result["fired"] for result in first.drain_results()) == 0
    assert sum(result["fired"] for result in second.drain_results()) == 1
    nudge = SagaTimeout.objects.get(saga=saga, name="nudge")
    assert [call["task"] for call in crash.seen(nudge.message_id)] == [DRAIN_TASK, DRAIN_TASK]
