"""A real Celery prefork worker (two pool children, an embedded beat) is one dispatcher: fresh
while it runs, however the beat's drain tasks fall on its children, and stale once it is
killed.

The beat hands each drain task to one child, most often the same one; the other one runs a
pass only when the first is busy (here: a burst of drain tasks sent at once). Its heartbeat
is the worker's, so an idle child never shows as a dispatcher gone quiet.

``STALE_AFTER`` is shortened to a few seconds so that "longer than ``STALE_AFTER``" is
reached by waiting for the worker's heartbeats; each status is then read at the moment of
the worker's newest heartbeat (freezegun), so a slow test process cannot make it stale.
"""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import Callable
from datetime import datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db.models import Max
from freezegun import freeze_time

from bsft_saga import clock, tasks
from bsft_saga.conf import saga_settings
from bsft_saga.models import SagaDispatcher
from bsft_saga.status import saga_status
from tests.support.celery_workers import Worker, enqueuing_to, wait_for

pytestmark = [pytest.mark.celery, pytest.mark.slow]

STALE_AFTER = 3
WORKER_ENV = {"BSFT_SAGA_DELIVERY_JSON": json.dumps({"STALE_AFTER": STALE_AFTER})}
_DRAIN_RUN_BY = re.compile(
    r"INFO/(ForkPoolWorker-\d+)\] Task bsft_saga\.tasks\.drain_saga_timeouts\[[^\]]+\] succeeded"
)


@pytest.fixture(autouse=True)
def _short_stale_after(settings: Any) -> None:
    settings.BSFT_SAGA = {
        **settings.BSFT_SAGA,
        "DELIVERY": {**settings.BSFT_SAGA["DELIVERY"], "STALE_AFTER": STALE_AFTER},
    }
    assert saga_settings.delivery.stale_after == timedelta(seconds=STALE_AFTER)


def _children_that_drained(worker: Worker) -> set[str]:
    return set(_DRAIN_RUN_BY.findall(worker.log()))


def _both_children_pass(worker: Worker, broker_url: str) -> None:
    """Send drain tasks in bursts until each of the worker's two children has run one."""

    def both() -> bool | None:
        with enqueuing_to(broker_url):
            for _ in range(10):
                tasks.drain_saga_timeouts.delay()
        return len(_children_that_drained(worker)) >= 2 or None

    wait_for(both, worker)


def _newest_heartbeat() -> datetime | None:
    newest: datetime | None = SagaDispatcher.objects.aggregate(newest=Max("last_pass_at"))["newest"]
    return newest


def _newest_heartbeat_after(moment: datetime) -> datetime | None:
    newest = _newest_heartbeat()
    return newest if newest is not None and newest > moment else None


def _status_json() -> dict[str, Any]:
    out = StringIO()
    call_command("saga_status", "--format", "json", stdout=out)
    document: dict[str, Any] = json.loads(out.getvalue())
    return document


@pytest.mark.timeout(180)
def test_an_idle_pool_child_of_a_live_worker_is_no_stale_dispatcher(
    start_worker: Callable[..., Worker], broker_url: str
) -> None:
    worker = start_worker(beat=True, pool="prefork", concurrency=2, env=WORKER_ENV)
    _both_children_pass(worker, broker_url)
    both_passed = clock.now()

    # Longer than STALE_AFTER later, while the beat's drains keep falling on one child.
    later = both_passed + timedelta(seconds=STALE_AFTER + 1)
    newest = wait_for(lambda: _newest_heartbeat_after(later), worker)

    with freeze_time(newest + timedelta(milliseconds=500)):
        status = saga_status()
        document = _status_json()
        call_command("saga_status", "--max-idle", str(STALE_AFTER), stdout=StringIO())
    worker.stop()

    assert [(d.kind, d.pid, d.stale) for d in status.dispatchers] == [
        ("celery", worker.process.pid, False)
    ]
    assert status.idle_warning is None
    assert [(d["pid"], d["stale"]) for d in document["dispatchers"]] == [
        (worker.process.pid, False)
    ]
    started_at = status.dispatchers[0].started_at
    assert started_at is not None
    assert started_at < both_passed  # the worker's start, not its children's first pass


@pytest.mark.timeout(180)
def test_a_killed_worker_is_stale_within_stale_after(
    start_worker: Callable[..., Worker], broker_url: str
) -> None:
    worker = start_worker(beat=True, pool="prefork", concurrency=2, env=WORKER_ENV)
    _both_children_pass(worker, broker_url)

    os.killpg(worker.process.pid, signal.SIGKILL)  # the worker, its pool and its beat
    killed_at = clock.now()
    assert worker.wait_exited() == -signal.SIGKILL

    with freeze_time(killed_at + timedelta(seconds=STALE_AFTER)):
        status = saga_status()
        document = _status_json()
        with pytest.raises(CommandError, match="is above --max-idle"):
            call_command("saga_status", "--max-idle", str(STALE_AFTER), stdout=StringIO())

    assert [(d.kind, d.pid, d.stale) for d in status.dispatchers] == [
        ("celery", worker.process.pid, True)
    ]
    assert status.idle_warning is not None
    assert [d["stale"] for d in document["dispatchers"]] == [True]
