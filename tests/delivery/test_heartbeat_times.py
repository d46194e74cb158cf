"""Heartbeats whose moments prove nothing: a ``last_pass_at`` far ahead of now (a host whose
clock runs ahead, a row written by hand) is no live dispatcher and the purge removes it, and a
moment stored out of range (year 10000 on PostgreSQL, written with raw SQL; its text on
SQLite) never fails ``saga_status``, ``GET status/`` or the admin's status panel.

The status judges at ``NOW`` with the default ``STALE_AFTER`` of the test settings (a
minute); tests/test_dispatchers.py has the heartbeats of dispatchers that behave.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client
from django.urls import reverse
from freezegun import freeze_time

from bsft_saga.dispatchers import claimer_of
from bsft_saga.models import DispatcherKind, SagaDispatcher, SagaOutboxMessage, SagaTimeout
from bsft_saga.retention import purge_saga_data
from bsft_saga.status import saga_status
from tests.admin.test_admin import _user
from tests.db.test_datetimes import UNREADABLE
from tests.testapp.ops_flows import make_saga, make_timer

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
STATUS_ROUTE = "/api/sagas/status/"
APP_INDEX = "/admin/bsft_saga/"


def dispatcher_row(*, last_pass_at: datetime | None, pid: int = 4242) -> SagaDispatcher:
    return SagaDispatcher.objects.create(
        host="worker-1",
        pid=pid,
        kind=DispatcherKind.LOOP,
        started_at=(last_pass_at or NOW) - timedelta(hours=1),
        last_pass_at=last_pass_at,
    )


def _client() -> Client:
    client = _user(f"hb-{uuid.uuid4().hex[:6]}", "view_sagainstance", "view_sagatimeout")
    client.get(APP_INDEX)  # import the URLconf (and psycopg) before freezegun patches datetime
    return client


def _command(*args: str) -> str:
    out = StringIO()
    call_command("saga_status", *args, stdout=out)
    return out.getvalue()


# -- a heartbeat far ahead of now ----------------------------------------------------------


def test_a_heartbeat_far_ahead_of_now_is_stale_and_not_the_newest_pass() -> None:
    live = dispatcher_row(last_pass_at=NOW - timedelta(seconds=3), pid=1)
    ahead = dispatcher_row(last_pass_at=NOW + timedelta(hours=1), pid=2)

    status = saga_status(now=NOW)

    assert status.idle_seconds == 3.0  # from the live one, not 0 from the row ahead
    assert status.idle_warning is None
    assert [(d.id, d.idle_seconds, d.stale, d.ahead_seconds) for d in status.dispatchers] == [
        (live.id, 3.0, False, None),
        (ahead.id, 0.0, True, 3600.0),
    ]


def test_a_heartbeat_far_ahead_alone_counts_as_no_dispatcher_passing() -> None:
    dispatcher_row(last_pass_at=NOW + timedelta(hours=1))

    with freeze_time(NOW):
        status = saga_status()
        with pytest.raises(CommandError, match="idle_seconds=null"):
            _command("--max-idle", "60")

    assert status.idle_seconds is None
    assert status.idle_warning == "no dispatcher has reported"
    assert [d.stale for d in status.dispatchers] == [True]


def test_a_heartbeat_a_little_ahead_is_a_live_dispatcher_idle_for_no_time() -> None:
    row = dispatcher_row(last_pass_at=NOW + timedelta(seconds=59))

    status = saga_status(now=NOW)

    assert status.idle_seconds == 0.0
    assert [(d.id, d.stale, d.ahead_seconds) for d in status.dispatchers] == [(row.id, False, None)]


def test_a_few_heartbeats_far_ahead_never_hide_the_live_ones_from_the_list() -> None:
    for pid in range(60):
        dispatcher_row(last_pass_at=NOW + timedelta(days=1, seconds=pid), pid=1000 + pid)
    live = dispatcher_row(last_pass_at=NOW - timedelta(seconds=5))

    status = saga_status(now=NOW)

    assert status.dispatchers[0].id == live.id
    assert status.idle_seconds == 5.0
    assert len(status.dispatchers) == 50


def test_the_text_the_json_and_the_status_panel_say_the_heartbeat_is_ahead() -> None:
    dispatcher_row(last_pass_at=NOW + timedelta(hours=1), pid=77)
    client = _client()

    with freeze_time(NOW):
        text = _command()
        document = json.loads(_command("--format", "json"))
        panel = client.get(APP_INDEX).content.decode()

    assert "loop worker-1:77  last pass 3600 s ahead of this clock  delivered=0" in text
    assert text.splitlines()[-2].endswith("stale")
    assert [(d["idle_seconds"], d["stale"]) for d in document["dispatchers"]] == [(0.0, True)]
    assert "<td>1 h 0 min ahead of this server's clock (stale)</td>" in panel


def test_a_row_claimed_by_a_dispatcher_far_ahead_names_it_stale() -> None:
    ahead = dispatcher_row(last_pass_at=NOW + timedelta(hours=1), pid=31)
    timer = _claimed_by(make_timer(make_saga("hb-ahead"), due_at=NOW), ahead)
    client = _client()

    claimer = claimer_of(timer, now=NOW)
    with freeze_time(NOW):
        page = client.get(reverse("admin:bsft_saga_sagatimeout_change", args=[timer.pk]))

    assert (claimer.claimed, claimer.stale, claimer.ahead_seconds) == (True, True, 3600.0)
    assert (
        "stale: last pass 1 h 0 min ahead of this server&#x27;s clock; the next pass claims"
        in page.content.decode()
    )


def test_the_purge_removes_heartbeats_far_ahead_and_keeps_one_a_little_ahead() -> None:
    far = dispatcher_row(last_pass_at=NOW + timedelta(hours=1), pid=1)
    never_passed = SagaDispatcher.objects.create(
        host="worker-1", pid=2, kind="loop", started_at=NOW + timedelta(hours=1)
    )
    a_little = dispatcher_row(last_pass_at=NOW + timedelta(seconds=30), pid=3)
    live = dispatcher_row(last_pass_at=NOW, pid=4)

    with freeze_time(NOW):
        assert purge_saga_data().dispatchers == 2

    assert set(SagaDispatcher.objects.values_list("pk", flat=True)) == {a_little.pk, live.pk}
    assert not SagaDispatcher.objects.filter(pk__in=[far.pk, never_passed.pk]).exists()


# -- a moment out of range -------------------------------------------------------------------


def _store(model: type[Any], pk: Any, column: str, value: str = UNREADABLE) -> None:
    """Write ``value`` into ``column`` with raw SQL (PostgreSQL stores year 10000; SQLite
    stores any text)."""
    if connection.vendor == "mysql":
        pytest.skip(
            "MariaDB and MySQL refuse a datetime after year 9999 or before year 1 when it is "
            "written: no stored value can be unreadable there"
        )
    key = pk.hex if connection.vendor == "sqlite" and isinstance(pk, uuid.UUID) else pk
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {model._meta.db_table} SET {column} = %s WHERE id = %s", [value, key]
        )


#: Year 10000 in UTC, and a moment before year 1 in UTC (0001-12-31 BC on PostgreSQL).
OUT_OF_RANGE = [
    pytest.param(UNREADABLE, id="year-10000"),
    pytest.param("0001-01-01 00:00:00+02", id="before-year-1"),
]


def _every_face_answers() -> dict[str, Any]:
    """``saga_status()``, the command (text, JSON), ``GET status/`` and the admin index at
    ``NOW``; each must answer."""
    client = _client()
    with freeze_time(NOW):
        status = saga_status()
        text = _command()
        document = json.loads(_command("--format", "json"))
        route = client.get(STATUS_ROUTE)
        panel = client.get(APP_INDEX)
    assert (route.status_code, panel.status_code) == (200, 200)
    assert route.json() == document
    return {"status": status, "text": text, "panel": panel.content.decode()}


@pytest.mark.parametrize("value", OUT_OF_RANGE)
def test_a_last_pass_out_of_range_fails_no_status_and_is_no_live_dispatcher(value: str) -> None:
    live = dispatcher_row(last_pass_at=NOW - timedelta(seconds=4), pid=1)
    broken = dispatcher_row(last_pass_at=NOW, pid=2)
    _store(SagaDispatcher, broken.pk, "last_pass_at", value)

    faces = _every_face_answers()

    status = faces["status"]
    assert [d.id for d in status.dispatchers] == [live.id]
    assert status.idle_seconds == 4.0
    assert "worker-1:1" in faces["text"]
    assert "worker-1:1" in faces["panel"]
    with freeze_time(NOW):
        assert purge_saga_data().dispatchers == 1
    assert list(SagaDispatcher.objects.values_list("pk", flat=True)) == [live.pk]


@pytest.mark.parametrize("value", OUT_OF_RANGE)
def test_a_start_out_of_range_fails_no_status_and_reads_as_null(value: str) -> None:
    row = dispatcher_row(last_pass_at=NOW - timedelta(seconds=4))
    _store(SagaDispatcher, row.pk, "started_at", value)

    faces = _every_face_answers()

    [listed] = faces["status"].dispatchers
    assert (listed.id, listed.stale) == (row.id, False)
    if connection.vendor == "postgresql" or value == UNREADABLE:
        assert listed.started_at is None
        assert faces["status"].as_dict()["dispatchers"][0]["started_at"] is None


@pytest.mark.parametrize("value", OUT_OF_RANGE)
def test_an_outbox_due_time_out_of_range_fails_no_status_and_is_not_late(value: str) -> None:
    row = SagaOutboxMessage.objects.create(
        id=uuid.uuid4(), event_type="tests.ops.noted", payload={}, created_at=NOW
    )
    _store(SagaOutboxMessage, row.pk, "deliver_at", value)

    status = _every_face_answers()["status"]

    assert (status.outbox_undelivered, status.lag_seconds) == (0, 0.0)


def test_a_row_claimed_by_a_dispatcher_whose_heartbeat_cannot_be_read_names_it_stale() -> None:
    broken = dispatcher_row(last_pass_at=NOW, pid=31)
    _store(SagaDispatcher, broken.pk, "last_pass_at")
    timer = _claimed_by(make_timer(make_saga("hb-unreadable"), due_at=NOW), broken)
    client = _client()

    claimer = claimer_of(timer, now=NOW)
    with freeze_time(NOW):
        page = client.get(reverse("admin:bsft_saga_sagatimeout_change", args=[timer.pk]))

    assert (claimer.claimed, claimer.stale, claimer.idle_seconds) == (True, True, None)
    assert page.status_code == 200
    assert "stale: last pass unreadable; the next pass claims" in page.content.decode()


def _claimed_by(row: SagaTimeout, dispatcher: SagaDispatcher) -> SagaTimeout:
    SagaTimeout.objects.filter(pk=row.pk).update(
        claim_token=uuid.uuid4(),
        claimed_until=NOW + timedelta(minutes=4),
        claimed_by=dispatcher.pk,
    )
    row.refresh_from_db()
    return row
