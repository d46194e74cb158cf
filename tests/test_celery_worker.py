"""A real Celery worker with embedded beat, over a real Redis, fires timers in real time.

The worker runs ``celery -A sample_project worker`` (the sample project's app, configured
from ``tests.settings`` with ``CELERY_TASK_ALWAYS_EAGER=0``) in a subprocess that shares the
test database. Nothing here moves the clock: a timer two poll intervals ahead fires because
beat ran ``drain_saga_timeouts`` after it came due. docs/celery.md describes this wiring.

The worker and this process use the Redis of ``tests.services.redis_url()``
(``CELERY_BROKER_URL``): Celery lets that environment variable override any broker an app
is given, so a database of its own for the worker would leave the test's messages behind.
It is flushed before each test, so a message left behind by an aborted run never reaches
the next worker; give concurrent runs different databases.
"""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis
from celery import Celery
from celery.app import app_or_default

from bsft_saga import publish
from bsft_saga.conf import saga_settings
from bsft_saga.models import SagaInstance, SagaOutboxMessage, SagaTimeout, TimeoutOutcome
from tests.services import redis_url, require_redis
from tests.testapp.events import TaskOpened
from tests.testapp.timer_flows import TaskFlow

pytestmark = [pytest.mark.celery, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
READY_TIMEOUT = 60.0  # seconds for the worker to connect and report "ready"
EVENT_TIMEOUT = 30.0  # seconds for the worker to do what a test waits for
_DRAIN_RESULT = re.compile(
    r"Task bsft_saga\.tasks\.drain_saga_timeouts\[[^\]]+\] succeeded in [^:]+: (\{.*\})"
)

T = TypeVar("T")


def worker_broker_url() -> str:
    """The broker of the worker and of ``enqueuing_to``: ``tests.services.redis_url()``."""
    return redis_url()


class Worker:
    """A ``celery worker`` subprocess whose output goes to a log file."""

    def __init__(self, process: subprocess.Popen[bytes], log_path: Path) -> None:
        self.process = process
        self.log_path = log_path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_until_ready(self) -> None:
        wait_for(lambda: " ready." in self.log() or None, self, timeout=READY_TIMEOUT)

    def drain_results(self) -> list[dict[str, int]]:
        """What each ``drain_saga_timeouts`` run returned, in order."""
        return [ast.literal_eval(m.group(1)) for m in _DRAIN_RESULT.finditer(self.log())]

    def stop(self) -> None:
        """Warm shutdown of the worker and its beat process; killed if it does not stop."""
        if self.process.poll() is not None:
            return
        # The process group: the embedded beat is a child process of the worker.
        _signal_group(self.process, signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            _signal_group(self.process, signal.SIGKILL)
            self.process.wait(timeout=20)


def _signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signum)


def wait_for(probe: Callable[[], T | None], worker: Worker, *, timeout: float = EVENT_TIMEOUT) -> T:
    """Poll ``probe`` until it returns a value; fail with the worker's log after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None:
            return value
        if worker.process.poll() is not None:
            pytest.fail(f"the worker exited ({worker.process.returncode}):\n{worker.log()}")
        if time.monotonic() > deadline:
            pytest.fail(f"gave up after {timeout:.0f}s; worker log:\n{worker.log()[-6000:]}")
        time.sleep(0.1)


@pytest.fixture
def broker_url() -> Iterator[str]:
    require_redis()
    url = worker_broker_url()
    client = redis.Redis.from_url(url)
    try:
        client.flushdb()
        yield url
        client.flushdb()
    finally:
        client.close()


@pytest.fixture
def start_worker(
    subprocess_env: dict[str, str], broker_url: str, tmp_path: Path
) -> Iterator[Callable[..., Worker]]:
    """Start ``celery -A sample_project worker`` (with ``beat=True``: and embedded beat)."""
    workers: list[Worker] = []
    env = {**subprocess_env, "CELERY_TASK_ALWAYS_EAGER": "0", "CELERY_BROKER_URL": broker_url}

    def start(*, beat: bool) -> Worker:
        command = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "sample_project",
            "worker",
            "--loglevel=INFO",
            "--pool=solo",
            "--without-mingle",
            "--without-gossip",
            f"--hostname=bsft-saga-test-{uuid.uuid4().hex[:8]}@%h",
        ]
        if beat:
            command += ["--beat", f"--schedule={tmp_path / 'celerybeat-schedule'}"]
        log_path = tmp_path / f"worker-{len(workers)}.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                command,
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        worker = Worker(process, log_path)
        workers.append(worker)
        worker.wait_until_ready()
        return worker

    try:
        yield start
    finally:
        for worker in workers:
            worker.stop()


@contextmanager
def enqueuing_to(broker_url: str) -> Iterator[None]:
    """Make this thread's ``deliver_event.delay`` really send to ``broker_url``.

    The suite's own app runs tasks eagerly (tests/settings.py); a separate app, current
    for the block, hands them to the worker instead.
    """
    previous = app_or_default()
    app = Celery("bsft-saga-worker-test", broker=broker_url, set_as_current=False)
    app.conf.task_always_eager = False
    app.set_current()
    try:
        yield
    finally:
        previous.set_current()
        app.close()


def _task_saga(task_id: str) -> SagaInstance:
    return SagaInstance.objects.for_key(TaskFlow.saga_type, task_id).get()


@pytest.mark.timeout(180)
def test_worker_beat_fires_a_timer_two_poll_intervals_ahead_exactly_once(
    start_worker: Callable[..., Worker],
) -> None:
    worker = start_worker(beat=True)
    delay = round(2 * saga_settings.timeouts.poll_interval.total_seconds())

    publish(TaskOpened("t-real-time", nudge_after_seconds=delay))
    nudge = SagaTimeout.objects.get(saga=_task_saga("t-real-time"), name="nudge")
    assert nudge.is_pending

    saga = wait_for(
        lambda: SagaInstance.objects.filter(pk=nudge.saga_id, step_index__gte=2).first(), worker
    )
    fired_in = len(worker.drain_results())
    # Two more beat ticks after the one that fired it: neither may fire it again.
    wait_for(lambda: len(worker.drain_results()) >= fired_in + 2 or None, worker)
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
