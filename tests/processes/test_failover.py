"""The database goes away under a dispatcher: failover, lost connections. On a database
server: the tests end the dispatcher's session (``pg_terminate_backend`` on PostgreSQL,
``KILL CONNECTION`` on MariaDB), as a failover or a server restart does, at each point of a
pass.

``drain_saga_timeouts --loop`` runs in a child (tests/workers/drain_loop.py) with the default
five-minute ``CLAIM_LEASE``: the rows its interrupted pass had claimed must come back within
``POLL_INTERVAL`` (one second here) plus a few seconds — given back by the next pass, not
left to the lease — fire exactly once, and be counted in the loop's totals. The last test
restarts the database server itself (PostgreSQL's ``pg_ctlcluster``, or MariaDB's shutdown and
start, as root on the machine the suite runs on; skipped with the reason elsewhere), which
ends every session on it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection, connections

from bsft_saga import clock
from bsft_saga.conf import saga_settings
from bsft_saga.models import SagaInstance, SagaTimeout
from tests.support.processes import Supervisor, supervised
from tests.support.services import require_postgres_backend, require_server_database
from tests.testapp.bulk import bulk_start_counters
from tests.testapp.load_flows import CountingFlow

pytestmark = pytest.mark.slow

TIMERS = 120
BATCH = 20
LOOP = "drain_loop.py"
# How long after the session was killed the stranded rows may take to fire: the loop's pause
# after a failed pass (POLL_INTERVAL) plus reconnecting and a pass, with room for a busy CI.
RECOVERY_SLACK = timedelta(seconds=8)


@pytest.fixture
def children(subprocess_env: dict[str, str], tmp_path: Path) -> Iterator[Supervisor]:
    require_server_database()
    with supervised(subprocess_env, tmp_path) as supervisor:
        yield supervisor


def _fired(keys: list[str]) -> int:
    return SagaTimeout.objects.filter(
        saga__correlation_key__in=keys, outcome="fired", name="wake"
    ).count()


def _wait(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def _terminate(pid: int) -> None:
    with connection.cursor() as cursor:
        if connection.vendor == "mysql":
            cursor.execute(f"KILL CONNECTION {int(pid)}")
            return
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
        assert cursor.fetchone() == (True,)


@pytest.mark.parametrize("point", ["claim", "window", "commit"])
def test_a_pass_that_loses_its_session_gives_back_its_claims_and_the_loop_counts_every_fire(
    children: Supervisor, tmp_path: Path, point: str
) -> None:
    keys = [f"failover-{uuid.uuid4().hex[:6]}-{i}" for i in range(TIMERS)]
    bulk_start_counters(keys, clock.now())
    pause_file, resume_file = tmp_path / "paused", tmp_path / "resume"
    loop = children.spawn(
        LOOP,
        "--batch-size", str(BATCH),
        "--pause-at", point,
        "--pause-after", str(2 * BATCH),
        "--pause-file", str(pause_file),
        "--resume-file", str(resume_file),
        name="loop",
    )  # fmt: skip

    _wait(pause_file.exists, 60, "the loop to reach the pause point")
    _terminate(int(pause_file.read_text()))
    # What the interrupted pass holds: claimed, pending, under a five-minute lease.
    leases = dict(SagaTimeout.objects.claimed(clock.now()).values_list("pk", "claimed_until"))
    stranded = list(leases)
    resume_file.touch()

    bound = saga_settings.delivery.poll_interval + RECOVERY_SLACK
    _wait(
        lambda: (
            SagaTimeout.objects.filter(pk__in=stranded, outcome="fired").count() == len(stranded)
        ),
        bound.total_seconds(),
        f"the {len(stranded)} stranded timers to fire",
    )
    # Given back, not left to the lease: each fired while its lost claim still held it.
    fired_at = SagaTimeout.objects.filter(pk__in=stranded).values_list("pk", "dispatched_at")
    late = [pk for pk, at in fired_at if at is None or (lease := leases[pk]) is None or at >= lease]
    assert late == []
    _wait(lambda: _fired(keys) == TIMERS, 60, "every timer to fire")
    loop.process.send_signal(signal.SIGTERM)
    assert loop.wait(timeout=60) == 0, loop.stderr()

    totals = loop.stdout_path.read_text().strip().splitlines()[-1]
    assert totals == f"fired={TIMERS} missed=0 failed=0 dead_lettered=0 unclaimed=0"
    assert "lost its connection" in loop.stderr() or "failed" in loop.stderr()
    sagas = SagaInstance.objects.filter(saga_type=CountingFlow.saga_type, correlation_key__in=keys)
    assert sorted(set(sagas.values_list("step_index", "version"))) == [(2, 2)]
    assert {saga.inbox_entries.count() for saga in sagas} == {2}


def _restart_command() -> Callable[[], None]:
    """What restarts the database server the suite uses, or a skip: PostgreSQL's cluster
    (``pg_ctlcluster``), or MariaDB (stopped and started again with ``start-stop-daemon``,
    as .ci/run starts it); root on the machine the server runs on, in both cases."""
    if connection.vendor == "mysql":
        return _mariadb_restart()
    require_postgres_backend()
    if os.environ.get("BSFT_SAGA_SKIP_PG_RESTART"):
        pytest.skip("BSFT_SAGA_SKIP_PG_RESTART is set: others share this PostgreSQL server")
    if shutil.which("pg_ctlcluster") is None or not Path("/etc/postgresql").is_dir():
        pytest.skip("no pg_ctlcluster here: the server cannot be restarted by this test")
    if os.geteuid() != 0:
        pytest.skip("restarting PostgreSQL needs root (pg_ctlcluster)")
    if connection.settings_dict.get("HOST") not in (None, "", "127.0.0.1", "localhost"):
        pytest.skip("the suite's PostgreSQL is not on this machine")
    versions = sorted(Path("/etc/postgresql").iterdir())
    command = [
        "pg_ctlcluster",
        "--skip-systemctl-redirect",
        versions[-1].name,
        "main",
        "restart",
        "--mode",
        "fast",
    ]
    return lambda: _run(command)


def _mariadb_restart() -> Callable[[], None]:
    if os.environ.get("BSFT_SAGA_SKIP_MARIADB_RESTART"):
        pytest.skip("BSFT_SAGA_SKIP_MARIADB_RESTART is set: others share this MariaDB server")
    server, admin = Path("/usr/sbin/mariadbd"), shutil.which("mariadb-admin")
    if not server.exists() or admin is None or shutil.which("start-stop-daemon") is None:
        pytest.skip("no mariadbd, mariadb-admin or start-stop-daemon here: cannot restart it")
    if os.geteuid() != 0:
        pytest.skip("restarting MariaDB needs root")
    settings = connection.settings_dict
    if settings.get("HOST") not in (None, "", "127.0.0.1", "localhost"):
        pytest.skip("the suite's MariaDB is not on this machine")
    login = ["-h", "127.0.0.1", "-P", str(settings.get("PORT") or 3306), "-u", settings["USER"]]

    def restart() -> None:
        daemon = ["start-stop-daemon", "--oknodo", "--exec", str(server)]
        _run([*daemon, "--stop", "--retry", "TERM/60"])  # a clean shutdown, waited for
        _run([*daemon, "--start", "--background"])
        _wait(
            lambda: subprocess.run([admin, *login, "ping"], capture_output=True).returncode == 0,
            60,
            "MariaDB to answer again",
        )

    return restart


def _run(command: list[str]) -> None:
    subprocess.run(command, check=True, capture_output=True, timeout=120)


def test_a_loop_draining_through_a_server_restart_fires_every_timer_once(
    children: Supervisor, tmp_path: Path
) -> None:
    restart = _restart_command()
    keys = [f"restart-{uuid.uuid4().hex[:6]}-{i}" for i in range(TIMERS)]
    bulk_start_counters(keys, clock.now())
    pause_file, resume_file = tmp_path / "paused", tmp_path / "resume"
    loop = children.spawn(
        LOOP,
        "--batch-size", str(BATCH),
        "--pause-at", "window",
        "--pause-after", str(2 * BATCH),
        "--pause-file", str(pause_file),
        "--resume-file", str(resume_file),
        name="loop",
    )  # fmt: skip
    _wait(pause_file.exists, 60, "the loop to reach the middle of a batch")

    connections.close_all()  # the restart ends this process's sessions too
    restart()
    restarted_at = time.monotonic()
    resume_file.touch()

    _wait(lambda: _fired(keys) == TIMERS, 60, "every timer to fire after the restart")
    assert (
        time.monotonic() - restarted_at < (saga_settings.delivery.claim_lease / 10).total_seconds()
    )
    loop.process.send_signal(signal.SIGTERM)
    assert loop.wait(timeout=60) == 0, loop.stderr()
    totals = loop.stdout_path.read_text().strip().splitlines()[-1]
    assert totals == f"fired={TIMERS} missed=0 failed=0 dead_lettered=0 unclaimed=0"
    sagas = SagaInstance.objects.filter(saga_type=CountingFlow.saga_type, correlation_key__in=keys)
    assert sorted(set(sagas.values_list("step_index", "version"))) == [(2, 2)]
    assert {saga.inbox_entries.count() for saga in sagas} == {2}
