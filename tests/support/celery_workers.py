"""Real Celery processes for the worker tests (loaded by tests/conftest.py as a plugin).

``start_worker`` runs ``celery -A sample_project worker`` (the sample project's app,
configured from ``tests.settings`` with ``CELERY_TASK_ALWAYS_EAGER=0``) and ``start_beat``
``celery -A sample_project beat``, in subprocesses that share the test database. Each
process leads a session of its own, so its pool children and an embedded beat share its
process group; whatever a test does to them, the fixtures kill every group they started
when the test ends, however it ends.

The processes and this one use the Redis of ``tests.support.services.redis_url()``
(``CELERY_BROKER_URL``): Celery lets that environment variable override any broker an app
is given, so a database of its own for the worker would leave the test's messages behind.
It is flushed before and after each test, so a message left behind by an aborted run never
reaches the next worker; give concurrent runs different databases.

A test parametrized with ``@pytest.mark.parametrize("broker_url", BROKERS, indirect=True)``
runs against RabbitMQ too (``rabbitmq_url()``, guest/guest on 127.0.0.1:5672 by default):
its queue (``queue()``) is purged before and after, and a RabbitMQ that does not answer skips
the test (fails it under ``CI=true``), as a missing Redis does.
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
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis
from celery import Celery
from celery.app import app_or_default

from tests.support.services import in_ci, redis_url, require_redis

ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT = 60.0  # seconds for a process to connect and report that it runs
EVENT_TIMEOUT = 30.0  # seconds for the worker to do what a test waits for
_DRAIN_RESULT = re.compile(
    r"Task bsft_saga\.tasks\.drain_saga_timeouts\[[^\]]+\] succeeded in [^:]+: (\{.*\})"
)

T = TypeVar("T")


class Worker:
    """A ``celery worker`` (or ``celery beat``) subprocess whose output goes to a log file."""

    def __init__(self, process: subprocess.Popen[bytes], log_path: Path) -> None:
        self.process = process
        self.log_path = log_path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_until(self, line: str) -> None:
        wait_for(lambda: line in self.log() or None, self, timeout=READY_TIMEOUT)

    def drain_results(self) -> list[dict[str, int]]:
        """What each ``drain_saga_timeouts`` run returned, in order."""
        return [ast.literal_eval(m.group(1)) for m in _DRAIN_RESULT.finditer(self.log())]

    def wait_for_more_drains(self, count: int = 2) -> None:
        """Wait until ``count`` more ``drain_saga_timeouts`` runs than so far have logged."""
        logged = len(self.drain_results())
        wait_for(lambda: len(self.drain_results()) >= logged + count or None, self)

    def received(self, task_id: str) -> int:
        """How many times the worker took the message of task ``task_id`` from the broker."""
        return len(re.findall(rf"\[{re.escape(task_id)}\] received", self.log()))

    def wait_exited(self, timeout: float = EVENT_TIMEOUT) -> int:
        """Wait (bounded) for the process to end; its return code (-9: SIGKILLed)."""
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running after {timeout:.0f}s; log:\n{self.log()[-6000:]}")

    def stop(self) -> None:
        """Warm shutdown of the process group; killed if it does not stop.

        A group whose leader is gone may still hold its children (a pool child, an
        embedded beat): they are killed.
        """
        if self.process.poll() is None:
            _signal_group(self.process, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                _signal_group(self.process, signal.SIGKILL)
                self.process.wait(timeout=20)
        _signal_group(self.process, signal.SIGKILL)


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


#: The brokers a test parametrized indirectly on ``broker_url`` runs against.
BROKERS = ("redis", "rabbitmq")
DEFAULT_RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672//"


def queue() -> str:
    """The queue bsft_saga's tasks are sent to and the workers consume: Celery's default,
    unless a lane of ``make test`` names its own (tests/settings.py)."""
    from django.conf import settings

    return str(settings.CELERY_TASK_DEFAULT_QUEUE)


def rabbitmq_url() -> str:
    """The RabbitMQ of the tests parametrized on it (``BSFT_SAGA_RABBITMQ_URL``)."""
    return os.environ.get("BSFT_SAGA_RABBITMQ_URL", DEFAULT_RABBITMQ_URL)


@pytest.fixture
def broker_url(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The broker of the workers and of ``enqueuing_to``, emptied before and after:
    ``redis_url()``, or ``rabbitmq_url()`` for a test parametrized with ``"rabbitmq"``."""
    if getattr(request, "param", "redis") == "rabbitmq":
        url = rabbitmq_url()
        _purge_rabbitmq(url)
        # The variable wins over the broker an app is given, in this process too.
        monkeypatch.setenv("CELERY_BROKER_URL", url)
        yield url
        _purge_rabbitmq(url)
        return
    require_redis()
    url = redis_url()
    client = redis.Redis.from_url(url)
    try:
        client.flushdb()
        yield url
        client.flushdb()
    finally:
        client.close()


def _purge_rabbitmq(url: str) -> None:
    """Empty the task queue (none yet is fine); skip, or fail under ``CI=true``, when
    RabbitMQ does not answer."""
    from amqp.exceptions import NotFound
    from kombu import Connection
    from kombu.exceptions import OperationalError

    try:
        with Connection(url, connect_timeout=2) as connection:
            connection.ensure_connection(max_retries=1)
            channel: Any = connection.channel()  # an amqp channel: it has queue_purge
            with suppress(NotFound):
                channel.queue_purge(queue())
    except (OperationalError, OSError) as exc:
        message = f"RabbitMQ not reachable at {url.split('@')[-1]}: {exc!r}"
        if in_ci():
            pytest.fail(f"{message}; CI requires it", pytrace=False)
        pytest.skip(f"{message}; set CI=true to make this a failure")


@pytest.fixture
def celery_processes(
    subprocess_env: dict[str, str], broker_url: str, tmp_path: Path
) -> Iterator[Callable[..., Worker]]:
    """Start ``celery -A sample_project <arguments>``; every one is stopped at the end."""
    started: list[Worker] = []
    base_env = {**subprocess_env, "CELERY_TASK_ALWAYS_EAGER": "0", "CELERY_BROKER_URL": broker_url}

    def start(arguments: list[str], *, env: Mapping[str, str], ready: str) -> Worker:
        command = [sys.executable, "-m", "celery", "-A", "sample_project", *arguments]
        log_path = tmp_path / f"celery-{len(started)}.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                command,
                cwd=ROOT,
                env={**base_env, **env},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        worker = Worker(process, log_path)
        started.append(worker)
        worker.wait_until(ready)
        return worker

    try:
        yield start
    finally:
        for worker in started:
            worker.stop()


@pytest.fixture
def start_worker(celery_processes: Callable[..., Worker], tmp_path: Path) -> Callable[..., Worker]:
    """Start a worker; ``beat=True``: with an embedded beat.

    ``pool="prefork"`` runs tasks in ``concurrency`` pool children (one by default) that the
    worker's parent process replaces when they die; the default ``solo`` pool runs them in
    the worker process itself. ``env`` adds to the environment (e.g. ``DJANGO_SETTINGS_MODULE``,
    ``BSFT_SAGA_DELIVERY_JSON``).
    """
    count = 0

    def start(
        *,
        beat: bool,
        pool: str = "solo",
        concurrency: int = 1,
        env: Mapping[str, str] | None = None,
    ) -> Worker:
        nonlocal count
        count += 1
        arguments = [
            "worker",
            "--loglevel=INFO",
            f"--pool={pool}",
            "--without-mingle",
            "--without-gossip",
            f"--hostname=bsft-saga-test-{uuid.uuid4().hex[:8]}@%h",
        ]
        if pool == "prefork":
            arguments.append(f"--concurrency={concurrency}")
        if beat:
            # A schedule file of its own: a killed beat may have left its own half-written.
            arguments += ["--beat", f"--schedule={tmp_path / f'worker-beat-{count}'}"]
        return celery_processes(arguments, env=env or {}, ready=" ready.")

    return start


@pytest.fixture
def start_beat(celery_processes: Callable[..., Worker], tmp_path: Path) -> Callable[..., Worker]:
    """Start a beat process of its own (the production layout): it sends the drain task
    every ``POLL_INTERVAL``, for whichever worker is running."""
    count = 0

    def start(*, env: Mapping[str, str] | None = None) -> Worker:
        nonlocal count
        count += 1
        arguments = ["beat", "--loglevel=INFO", f"--schedule={tmp_path / f'beat-{count}'}"]
        return celery_processes(arguments, env=env or {}, ready="beat: Starting...")

    return start


@contextmanager
def enqueuing_to(broker_url: str) -> Iterator[None]:
    """Make this thread's ``deliver_event.delay`` really send to ``broker_url``.

    The suite's own app runs tasks eagerly (tests/settings.py); a separate app, current
    for the block, hands them to the worker instead.
    """
    previous = app_or_default()
    app = Celery("bsft-saga-worker-test", broker=broker_url, set_as_current=False)
    app.conf.task_always_eager = False
    app.conf.task_default_queue = queue()  # the workers'
    app.set_current()
    try:
        yield
    finally:
        previous.set_current()
        app.close()
