"""Dispatchers that report in: the heartbeat a pass writes, what the status, the command,
the route and the admin say of it, and the purge that prunes the heartbeats of processes long
gone.

A process reports only inside ``reporting()`` (``drain_saga_timeouts --loop`` and the
Celery drain task enter it); the real ``--loop`` process, killed or stopped, is in
tests/processes/test_dispatcher_heartbeats.py.
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError, ManagementUtility, call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from freezegun import freeze_time
from rest_framework.test import APIClient

from bsft_saga import clock, publish, tasks
from bsft_saga.delivery import heartbeat
from bsft_saga.delivery.heartbeat import Dispatcher, reporting, signed_off
from bsft_saga.dispatchers import claimer_of
from bsft_saga.draining import drain_round
from bsft_saga.models import DispatcherKind, SagaDispatcher, SagaOutboxMessage, SagaTimeout
from bsft_saga.retention import purge_saga_data
from bsft_saga.status import saga_status
from bsft_saga.testing import SagaHarness
from bsft_saga.timeouts import drain_due
from tests.admin.test_admin import _user
from tests.testapp.load_events import CountStarted
from tests.testapp.ops_flows import make_saga, make_timer

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
DISPATCHER_TABLE = SagaDispatcher._meta.db_table
#: The default STALE_AFTER under the test settings (POLL_INTERVAL 1 s): its floor.
STALE_AFTER = 60.0


@pytest.fixture
def loop() -> Iterator[Dispatcher]:
    """This process, reporting as a ``--loop`` dispatcher; a new identity for each test."""
    with reporting(DispatcherKind.LOOP) as dispatcher:
        yield dispatcher
    signed_off(DispatcherKind.LOOP)


@pytest.fixture
def fresh_celery_identity() -> Iterator[None]:
    signed_off(DispatcherKind.CELERY)
    yield
    signed_off(DispatcherKind.CELERY)


def _start_counters(n: int) -> list[str]:
    keys = [f"hb-{uuid.uuid4().hex[:6]}-{i}" for i in range(n)]
    for key in keys:
        publish(CountStarted(key))  # its wake-up timer is due at once
    return keys


def _wake_timers(keys: list[str]) -> Any:
    return SagaTimeout.objects.filter(saga__correlation_key__in=keys, name="wake")


def dispatcher_row(
    *,
    last_pass_at: datetime,
    kind: str = DispatcherKind.LOOP,
    host: str = "worker-1",
    pid: int = 4242,
    delivered: int = 0,
    claims: int = 0,
) -> SagaDispatcher:
    return SagaDispatcher.objects.create(
        host=host,
        pid=pid,
        kind=kind,
        started_at=last_pass_at - timedelta(hours=1),
        last_pass_at=last_pass_at,
        delivered=delivered,
        claims=claims,
    )


# -- who reports ------------------------------------------------------------------------------


def test_a_pass_of_code_that_does_not_report_writes_no_heartbeat_and_its_claims_name_nobody() -> (
    None
):
    keys = _start_counters(2)

    assert drain_round().timers.fired == 2

    assert not SagaDispatcher.objects.exists()
    assert list(_wake_timers(keys).values_list("outcome", "claimed_by")) == [("fired", None)] * 2


def test_the_harness_writes_no_heartbeat() -> None:
    with SagaHarness() as harness:
        harness.publish(CountStarted("hb-harness", wake_after_seconds=60))
        assert harness.advance_time(timedelta(minutes=2)) == 1

    assert not SagaDispatcher.objects.exists()


def test_a_reporting_pass_writes_its_heartbeat_and_its_claims_name_the_dispatcher(
    loop: Dispatcher,
) -> None:
    keys = _start_counters(3)
    moment = clock.now() + timedelta(seconds=5)

    with freeze_time(moment):
        assert drain_round().timers.fired == 3

    row = SagaDispatcher.objects.get()
    assert (row.id, row.kind, row.host, row.pid) == (
        loop.id,
        "loop",
        socket.gethostname(),
        os.getpid(),
    )
    assert (row.last_pass_at, row.delivered, row.claims) == (moment, 3, 0)
    assert set(_wake_timers(keys).values_list("claimed_by", flat=True)) == {loop.id}


def test_an_idle_dispatcher_reports_at_most_once_a_second(
    loop: Dispatcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    drain_round()  # nothing due: it reports all the same, that it polls
    first = SagaDispatcher.objects.get(pk=loop.id).last_pass_at
    assert first is not None

    # Timestamps move, real time does not: within REPORT_EVERY, idle passes write nothing.
    with freeze_time(first + timedelta(seconds=30)), CaptureQueriesContext(connection) as idle:
        drain_round()
    assert not [q for q in idle.captured_queries if DISPATCHER_TABLE in q["sql"]]
    assert SagaDispatcher.objects.get(pk=loop.id).last_pass_at == first

    monkeypatch.setattr(heartbeat, "REPORT_EVERY", 0.0)
    with freeze_time(first + timedelta(seconds=31)):
        drain_round()
    assert SagaDispatcher.objects.get(pk=loop.id).last_pass_at == first + timedelta(seconds=31)


def test_a_dispatcher_whose_row_was_pruned_writes_it_again(loop: Dispatcher) -> None:
    _start_counters(1)
    drain_round()
    SagaDispatcher.objects.all().delete()
    _start_counters(2)

    drain_round()

    row = SagaDispatcher.objects.get(pk=loop.id)
    assert (row.delivered, row.claims, row.pid) == (2, 0, os.getpid())


@pytest.mark.django_db(transaction=True)
def test_a_reporting_pass_pays_one_statement_in_its_claim_and_one_at_its_end(
    loop: Dispatcher,
) -> None:
    drain_due()  # the first heartbeat, which inserts the row
    keys = _start_counters(3)

    with CaptureQueriesContext(connection) as captured:
        assert drain_due().fired == 3

    statements = [q["sql"] for q in captured.captured_queries]
    beats = [i for i, sql in enumerate(statements) if DISPATCHER_TABLE in sql]
    assert [statements[i].split()[0] for i in beats] == ["UPDATE", "UPDATE"]
    # The first inside the claim's transaction, before its COMMIT; the second after the
    # pass's last commit, on its own.
    assert beats[0] < statements.index("COMMIT")
    assert beats[1] == len(statements) - 1
    assert SagaDispatcher.objects.get(pk=loop.id).delivered == 3
    assert set(_wake_timers(keys).values_list("claimed_by", flat=True)) == {loop.id}


def test_a_forked_child_is_a_dispatcher_of_its_own(loop: Dispatcher) -> None:
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child)
        try:
            parents = heartbeat.current()
            with reporting(DispatcherKind.LOOP) as own:
                os.write(write, f"{parents} {own.id} {own.pid}".encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        inherited, own_id, own_pid = answer.read().split()
    os.waitpid(child, 0)

    assert inherited == "None"  # it does not report as its parent
    assert uuid.UUID(own_id) != loop.id
    assert int(own_pid) == child


class _RecordedDeletes:
    """Stands for ``SagaDispatcher`` in a forked child, which must not use the parent's
    database connection: records what ``signed_off`` would delete."""

    def __init__(self) -> None:
        self.deleted: list[Any] = []
        self.objects = self

    def filter(self, **lookups: Any) -> Any:
        deleted = self.deleted

        class _Rows:
            def delete(self) -> None:
                deleted.append(lookups)

        return _Rows()


def test_a_child_forked_from_a_worker_reports_as_the_worker_and_leaves_its_row_when_it_stops(
    fresh_celery_identity: None,
) -> None:
    worker = heartbeat.shared_with_forks(DispatcherKind.CELERY)
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child)
        try:
            recorded = _RecordedDeletes()
            heartbeat.SagaDispatcher = recorded  # type: ignore[assignment,misc]
            with reporting(DispatcherKind.CELERY) as own:
                current = heartbeat.current()
                answer = [own.id, own.pid, own.started_at.isoformat(), current is own, own.shared]
            signed_off(DispatcherKind.CELERY)  # its pool stops it, or max-tasks-per-child
            os.write(write, json.dumps([*map(str, answer), len(recorded.deleted)]).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        own_id, own_pid, started_at, reports, shared, deletes = json.loads(pipe.read())
    os.waitpid(child, 0)

    # The worker's row: its id, its pid, its start; the child's own counters.
    assert (uuid.UUID(own_id), int(own_pid), started_at) == (
        worker.id,
        os.getpid(),
        worker.started_at.isoformat(),
    )
    assert (reports, shared) == ("True", "False")  # its own forks get identities of their own
    assert deletes == 0  # the row is the worker's: the worker deletes it when it stops
    assert heartbeat.current() is None  # the worker itself runs no pass


def test_a_worker_reports_on_one_row_and_deletes_it_when_it_stops(
    fresh_celery_identity: None,
) -> None:
    worker = heartbeat.shared_with_forks(DispatcherKind.CELERY)
    _start_counters(2)
    with reporting(DispatcherKind.CELERY) as own:  # the solo pool: the worker runs the task
        assert drain_round().timers.fired == 2
    assert own is worker

    row = SagaDispatcher.objects.get()
    assert (row.id, row.pid, row.delivered) == (worker.id, os.getpid(), 2)
    signed_off(DispatcherKind.CELERY)
    assert not SagaDispatcher.objects.exists()


def test_the_celery_drain_task_run_in_this_process_is_no_worker_and_reports_nothing(
    fresh_celery_identity: None,
) -> None:
    # Called as a function (the demo, code) or eagerly: a heartbeat would go stale the moment
    # it returns. A worker's run of it reports (tests/processes/test_celery_worker.py).
    keys = _start_counters(2)

    assert tasks.drain_saga_timeouts()["fired"] == 1 + 1
    tasks.drain_saga_timeouts.apply()

    assert not SagaDispatcher.objects.exists()
    assert set(_wake_timers(keys).values_list("claimed_by", flat=True)) == {None}


def test_a_dispatcher_signing_off_removes_its_row(loop: Dispatcher) -> None:
    drain_round()
    assert SagaDispatcher.objects.filter(pk=loop.id).exists()

    signed_off(DispatcherKind.LOOP)

    assert not SagaDispatcher.objects.exists()


# -- the status -------------------------------------------------------------------------------


def test_the_status_lists_dispatchers_newest_pass_first_and_the_idle_time_of_the_newest() -> None:
    fresh = dispatcher_row(last_pass_at=NOW - timedelta(seconds=3), delivered=120)
    stale = dispatcher_row(
        last_pass_at=NOW - timedelta(seconds=75), kind="celery", host="worker-2", pid=77, claims=5
    )

    status = saga_status(now=NOW)

    assert status.idle_seconds == 3.0
    assert status.idle_warning is None
    assert [(d.id, d.idle_seconds, d.stale) for d in status.dispatchers] == [
        (fresh.id, 3.0, False),
        (stale.id, 75.0, True),
    ]


def test_the_status_warns_when_no_dispatcher_has_passed_within_stale_after() -> None:
    dispatcher_row(last_pass_at=NOW - timedelta(seconds=75))

    status = saga_status(now=NOW)

    assert status.idle_seconds == 75.0
    assert status.idle_warning == "no dispatcher has passed in 75 s"


def test_the_json_document_has_the_dispatchers_with_iso_times() -> None:
    row = dispatcher_row(last_pass_at=NOW - timedelta(seconds=3), delivered=120, claims=2)

    with freeze_time(NOW):
        document = json.loads(_run("saga_status", "--format", "json"))

    assert document["idle_seconds"] == 3.0
    assert document["stale_after_seconds"] == STALE_AFTER
    assert document["idle_warning"] is None
    assert document["dispatchers"] == [
        {
            "id": str(row.id),
            "kind": "loop",
            "host": "worker-1",
            "pid": 4242,
            "started_at": "2026-03-02T10:59:57+00:00",
            "last_pass_at": "2026-03-02T11:59:57+00:00",
            "delivered": 120,
            "claims": 2,
            "idle_seconds": 3.0,
            "stale": False,
        }
    ]


def test_the_json_document_says_null_and_no_dispatcher_has_reported_when_none_has() -> None:
    with freeze_time(NOW):
        document = json.loads(_run("saga_status", "--format", "json"))

    assert (document["idle_seconds"], document["dispatchers"]) == (None, [])
    assert document["idle_warning"] == "no dispatcher has reported"


def test_the_text_lists_each_dispatcher_and_says_when_none_has_passed_lately() -> None:
    dispatcher_row(last_pass_at=NOW - timedelta(seconds=75), delivered=9, claims=1)

    with freeze_time(NOW):
        lines = _run("saga_status").splitlines()

    assert lines[-5].split() == ["idle_seconds", "75.000"]
    assert lines[-3].split() == ["dispatchers", "1"]
    assert lines[-2].split() == [
        *("loop", "worker-1:4242", "last", "pass", "75", "s", "ago"),
        *("delivered=9", "claims=1", "stale"),
    ]
    assert lines[-1] == "no dispatcher has passed in 75 s"


def _run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.mark.parametrize(("idle", "limit"), [(30, "60"), (60, "60"), (59.5, "59.5")])
def test_max_idle_passes_while_a_dispatcher_passed_within_it(idle: float, limit: str) -> None:
    dispatcher_row(last_pass_at=NOW - timedelta(seconds=idle))

    with freeze_time(NOW):
        assert "idle_seconds" in _run("saga_status", "--max-idle", limit)


def test_max_idle_fails_when_the_newest_pass_is_older() -> None:
    dispatcher_row(last_pass_at=NOW - timedelta(seconds=90))
    dispatcher_row(last_pass_at=NOW - timedelta(seconds=400), pid=1)

    with (
        freeze_time(NOW),
        pytest.raises(CommandError, match=r"idle_seconds=90\.000 is above --max-idle 60"),
    ):
        _run("saga_status", "--max-idle", "60")


def test_max_idle_fails_when_no_dispatcher_reports() -> None:
    with pytest.raises(CommandError, match="idle_seconds=null: no dispatcher reports"):
        _run("saga_status", "--max-idle", "3600", "--format", "json")


def test_max_idle_exits_with_status_1() -> None:
    dispatcher_row(last_pass_at=NOW - timedelta(seconds=90))

    with freeze_time(NOW), pytest.raises(SystemExit) as exit_:
        ManagementUtility(["manage.py", "saga_status", "--max-idle", "60"]).execute()

    assert exit_.value.code == 1


@pytest.mark.parametrize("limit", ["-1", "nan", "inf"])
def test_max_idle_must_be_a_finite_number_of_seconds(limit: str) -> None:
    with pytest.raises(CommandError, match="--max-idle must be a number of seconds"):
        _run("saga_status", "--max-idle", limit)


def test_the_route_serves_the_dispatchers_like_the_command() -> None:
    dispatcher_row(last_pass_at=NOW - timedelta(seconds=75))
    user = User.objects.create_user("hb-viewer")
    user.user_permissions.set(Permission.objects.filter(codename="view_sagainstance"))
    client = APIClient()
    client.force_login(user)

    with freeze_time(NOW):
        response = client.get("/api/sagas/status/")
        command = json.loads(_run("saga_status", "--format", "json"))

    assert response.status_code == 200
    assert response.json() == command
    assert response.json()["idle_warning"] == "no dispatcher has passed in 75 s"
    assert response.json()["dispatchers"][0]["stale"] is True


# -- the purge --------------------------------------------------------------------------------


def test_the_purge_prunes_heartbeats_that_went_quiet_a_day_ago_and_keeps_the_others() -> None:
    now = clock.now()
    gone = dispatcher_row(last_pass_at=now - timedelta(days=1, minutes=1))
    stale = dispatcher_row(last_pass_at=now - timedelta(hours=2), pid=2)
    live = dispatcher_row(last_pass_at=now, pid=3)

    assert purge_saga_data(dry_run=True).dispatchers == 1
    assert SagaDispatcher.objects.count() == 3
    report = purge_saga_data()

    assert report.dispatchers == 1
    assert set(SagaDispatcher.objects.values_list("pk", flat=True)) == {stale.pk, live.pk}
    assert not SagaDispatcher.objects.filter(pk=gone.pk).exists()
    assert _run("purge_saga_data").splitlines()[-1].endswith(" dispatchers=0")


# -- the admin --------------------------------------------------------------------------------

APP_INDEX = "/admin/bsft_saga/"


def _admin(*codenames: str) -> Client:
    client = _user(f"hb-{uuid.uuid4().hex[:6]}", *codenames)
    client.get(APP_INDEX)  # import the URLconf (and psycopg) before freezegun patches datetime
    return client


def _status_panel() -> str:
    """The *Sagas* app index at ``NOW``, as a user who may view sagas sees it."""
    client = _admin("view_sagainstance")
    with freeze_time(NOW):
        return client.get(APP_INDEX).content.decode()


def test_the_status_panel_shows_a_stale_dispatcher_and_the_idle_time_in_the_warning_colour() -> (
    None
):
    dispatcher_row(last_pass_at=NOW - timedelta(seconds=75), host="worker-9", pid=99)
    page = _status_panel()

    row = '<tr class="saga-warning"><th scope="row">loop worker-9:99</th><td>1 min 15 s ago'
    assert row in page
    assert '<td id="saga-idle" class="saga-warning">1 min 15 s ago</td>' in page
    assert "No dispatcher has passed in 1 min 15 s." in page
    assert ".saga-warning { color: var(--error-fg)" in page


def test_the_status_panel_shows_a_dispatcher_that_passed_lately_and_a_small_lag_plainly() -> None:
    dispatcher_row(last_pass_at=NOW - timedelta(seconds=2), host="worker-9", pid=99)
    make_timer(make_saga("hb-late"), "late", due_at=NOW - timedelta(seconds=30))
    page = _status_panel()

    assert '<tr><th scope="row">loop worker-9:99</th><td>2 s ago</td>' in page
    assert '<td id="saga-idle">2 s ago</td>' in page
    assert "Lag</th><td>30.0 s</td>" in page
    assert "No dispatcher has" not in page


def test_the_status_panel_shows_a_lag_above_stale_after_in_the_warning_colour() -> None:
    make_timer(make_saga("hb-late"), "late", due_at=NOW - timedelta(seconds=61))
    page = _status_panel()

    assert 'Lag</th><td class="saga-warning">1 min 1 s</td>' in page
    assert "No dispatcher has reported" in page


# -- a claimed row's claimer ------------------------------------------------------------------


def _claimed_by(row: SagaTimeout | SagaOutboxMessage, dispatcher: SagaDispatcher | None) -> Any:
    type(row).objects.filter(pk=row.pk).update(
        claim_token=uuid.uuid4(),
        claimed_until=NOW + timedelta(minutes=4),
        claimed_by=dispatcher.pk if dispatcher else uuid.uuid4(),
    )
    row.refresh_from_db()
    return row


def test_a_claimed_row_names_its_claimer_the_lease_end_and_whether_its_heartbeat_is_stale() -> None:
    dead = dispatcher_row(last_pass_at=NOW - timedelta(seconds=90))
    timer = _claimed_by(make_timer(make_saga("hb-claimed"), due_at=NOW), dead)

    claimer = claimer_of(timer, now=NOW)

    assert claimer.dispatcher == dead
    assert claimer.lease_ends == NOW + timedelta(minutes=4)
    assert (claimer.claimed, claimer.stale, claimer.idle_seconds) == (True, True, 90.0)
    assert claimer_of(timer, now=NOW - timedelta(seconds=60)).stale is False


def test_a_row_whose_claimer_was_pruned_names_its_id_and_no_heartbeat() -> None:
    timer = _claimed_by(make_timer(make_saga("hb-pruned"), due_at=NOW), None)

    claimer = claimer_of(timer, now=NOW)

    assert claimer.dispatcher_id == timer.claimed_by
    assert (claimer.dispatcher, claimer.stale, claimer.claimed) == (None, None, True)


def test_the_timer_page_says_its_claimer_is_stale_in_the_warning_colour() -> None:
    dead = dispatcher_row(last_pass_at=NOW - timedelta(seconds=90), host="worker-3", pid=31)
    timer = _claimed_by(make_timer(make_saga("hb-page"), due_at=NOW), dead)
    client = _admin("view_sagatimeout")

    with freeze_time(NOW):
        page = client.get(reverse("admin:bsft_saga_sagatimeout_change", args=[timer.pk]))

    text = page.content.decode()
    assert page.status_code == 200
    assert "loop worker-3:31" in text
    warning = '<strong class="saga-warning" style="color: var(--error-fg)">stale: last pass'
    assert f"{warning} 1 min 30 s ago" in text


def test_the_outbox_row_page_names_a_live_claimer_plainly() -> None:
    live = dispatcher_row(last_pass_at=NOW - timedelta(seconds=2), host="worker-4", pid=41)
    row = SagaOutboxMessage.objects.create(
        id=uuid.uuid4(), event_type="tests.ops.noted", payload={}, created_at=NOW
    )
    row = _claimed_by(row, live)
    client = _admin("view_sagaoutboxmessage")

    with freeze_time(NOW):
        text = client.get(
            reverse("admin:bsft_saga_sagaoutboxmessage_change", args=[row.pk])
        ).content.decode()

    assert "loop worker-4:41" in text
    assert "last pass 2 s ago" in text
    assert 'class="saga-warning"' not in text
