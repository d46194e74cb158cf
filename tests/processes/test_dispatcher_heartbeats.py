"""A real ``manage.py drain_saga_timeouts --loop`` reports in: its heartbeat row while it
polls, its name on the rows it claims, its row gone when it stops; killed, its heartbeat
goes stale, ``saga_status --max-idle`` fails, the rows it holds name it as a stale claimer,
and the purge prunes it a day later.

The loop polls every second (``POLL_INTERVAL`` of tests/settings.py); "later" is reached by
moving this process's clock (freezegun), never by waiting for it.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any, TypeVar

import pytest
from django.core.management import CommandError, call_command
from freezegun import freeze_time

from bsft_saga import publish
from bsft_saga.conf import saga_settings
from bsft_saga.dispatchers import claimer_of
from bsft_saga.models import SagaDispatcher, SagaTimeout
from bsft_saga.querysets import DeliveryStatus
from bsft_saga.retention import purge_saga_data
from bsft_saga.status import saga_status
from tests.support.processes import Supervisor, supervised
from tests.testapp.load_events import CountStarted

pytestmark = pytest.mark.slow

T = TypeVar("T")


def _wait_for(probe: Callable[[], T | None], what: str, timeout: float = 30) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def loop_process(
    subprocess_env: dict[str, str], tmp_path: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m django drain_saga_timeouts --loop``, killed if the test leaves it running."""
    with (tmp_path / "loop.out").open("wb") as out, (tmp_path / "loop.err").open("wb") as err:
        child = subprocess.Popen(
            [sys.executable, "-m", "django", "drain_saga_timeouts", "--loop"],
            env=subprocess_env,
            stdout=out,
            stderr=err,
        )
    try:
        yield child
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)


def _row_of(pid: int) -> SagaDispatcher | None:
    return SagaDispatcher.objects.filter(pid=pid).first()


def _start(*keys: str) -> list[SagaTimeout]:
    for key in keys:
        publish(CountStarted(key))  # its wake-up timer is due at once
    return list(SagaTimeout.objects.filter(saga__correlation_key__in=keys, name="wake"))


def _status_json() -> dict[str, Any]:
    out = StringIO()
    call_command("saga_status", "--format", "json", stdout=out)
    document: dict[str, Any] = json.loads(out.getvalue())
    return document


def test_a_loop_reports_while_idle_names_itself_on_its_claims_and_signs_off_when_stopped(
    loop_process: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    row = _wait_for(lambda: _row_of(loop_process.pid), "the loop's first heartbeat")
    assert (row.kind, row.host, row.claims, row.delivered) == ("loop", socket.gethostname(), 0, 0)
    first = row.last_pass_at
    assert first is not None
    # Nothing is due, and it keeps reporting that it polls.
    _wait_for(
        lambda: SagaDispatcher.objects.filter(pk=row.pk, last_pass_at__gt=first).exists(),
        "an idle pass's heartbeat",
    )

    timers = _start("hb-loop-1", "hb-loop-2")
    _wait_for(
        lambda: SagaDispatcher.objects.filter(pk=row.pk, delivered=2).first(),
        "the loop to report two delivered timers",
    )

    fired = SagaTimeout.objects.filter(pk__in=[t.pk for t in timers])
    assert set(fired.values_list("outcome", "claimed_by")) == {("fired", row.pk)}
    document = _status_json()
    [listed] = [d for d in document["dispatchers"] if d["pid"] == loop_process.pid]
    assert (listed["id"], listed["delivered"], listed["claims"]) == (str(row.pk), 2, 0)
    assert listed["stale"] is False
    assert document["idle_warning"] is None
    call_command("saga_status", "--max-idle", "30", stdout=StringIO())  # passes

    loop_process.send_signal(signal.SIGTERM)
    assert loop_process.wait(timeout=30) == 0, (tmp_path / "loop.err").read_text()
    assert not SagaDispatcher.objects.filter(pk=row.pk).exists()


@pytest.fixture
def children(subprocess_env: dict[str, str], tmp_path: Path) -> Iterator[Supervisor]:
    with supervised(subprocess_env, tmp_path) as supervisor:
        yield supervisor


def test_a_killed_loop_goes_stale_and_the_rows_it_claimed_name_it_until_its_lease_ends(
    children: Supervisor, tmp_path: Path
) -> None:
    held_file = tmp_path / "held"
    timers = _start("hb-killed-1", "hb-killed-2", "hb-killed-3")
    loop = children.spawn("held_loop.py", "--held-file", str(held_file), name="held-loop")
    _wait_for(held_file.exists, "the loop to hold its pass")
    loop.process.send_signal(signal.SIGKILL)
    assert loop.wait(timeout=30) == -signal.SIGKILL

    row = SagaDispatcher.objects.get(pid=loop.pid)
    assert (row.kind, row.claims, row.delivered) == ("loop", 3, 0)
    claimed = list(SagaTimeout.objects.filter(pk__in=[t.pk for t in timers]))
    assert {timer.claimed_by for timer in claimed} == {row.pk}
    assert {timer.status() for timer in claimed} == {DeliveryStatus.CLAIMED}
    assert row.last_pass_at is not None
    stale_after = saga_settings.delivery.stale_after
    later = row.last_pass_at + stale_after + timedelta(seconds=5)
    idle = (later - row.last_pass_at).total_seconds()

    with freeze_time(later):
        status = saga_status()
        document = _status_json()
        with pytest.raises(CommandError, match=rf"idle_seconds={idle:.3f} is above --max-idle"):
            call_command("saga_status", "--max-idle", str(stale_after.total_seconds()))
        claimer = claimer_of(claimed[0])

    [listed] = [d for d in status.dispatchers if d.pid == loop.pid]
    assert listed.stale
    assert status.idle_warning == f"no dispatcher has passed in {idle:.0f} s"
    assert document["idle_warning"] == status.idle_warning
    assert (claimer.dispatcher, claimer.claimed, claimer.stale) == (row, True, True)
    assert claimer.lease_ends == claimed[0].claimed_until
    assert claimer.lease_ends is not None
    assert claimer.lease_ends > later  # held until then, by a process that is gone

    with freeze_time(row.last_pass_at + timedelta(days=1, minutes=1)):
        assert purge_saga_data().dispatchers == 1
    assert not SagaDispatcher.objects.filter(pid=loop.pid).exists()
