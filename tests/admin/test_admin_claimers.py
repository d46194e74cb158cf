"""A timer's or an outbox row's page: who holds it, until when, and whether that one still
reports in; and a retired row, which nobody holds, named plainly."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import Client
from freezegun import freeze_time

from bsft_saga.models import DispatcherKind, SagaDispatcher, SagaOutboxMessage, SagaTimeout
from tests.support.admin import admin_url, staff_client
from tests.testapp.ops_flows import make_saga, make_timer

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
LEASE_ENDS = NOW + timedelta(minutes=4)
WARNING = 'class="saga-warning"'


def _dispatcher(idle: timedelta, host: str = "worker-3", pid: int = 31) -> SagaDispatcher:
    return SagaDispatcher.objects.create(
        host=host,
        pid=pid,
        kind=DispatcherKind.CELERY,
        started_at=NOW - timedelta(days=1),
        last_pass_at=NOW - idle,
    )


def _claimed(row: Any, dispatcher: SagaDispatcher, until: datetime = LEASE_ENDS) -> Any:
    type(row).objects.filter(pk=row.pk).update(
        claim_token=uuid.uuid4(), claimed_until=until, claimed_by=dispatcher.pk
    )
    return row


def _fields(row: SagaTimeout | SagaOutboxMessage) -> dict[str, str]:
    """The page's *claimed by* and *claimer's heartbeat* fields at ``NOW``, as HTML."""
    model = str(type(row)._meta.model_name)
    client: Client = staff_client(f"v-{uuid.uuid4().hex[:6]}", f"view_{model}")
    client.get(admin_url(model, "changelist"))  # import the URLconf before freezegun patches
    with freeze_time(NOW):
        response = client.get(admin_url(model, "change", row.pk))
    assert response.status_code == 200
    html = response.content.decode()
    return {name: _readonly(html, name) for name in ("claimer", "claimer_heartbeat")}


def _readonly(html: str, field: str) -> str:
    row = html.split(f'class="form-row field-{field}"', 1)[1]
    return row.split('<div class="readonly">', 1)[1].split("</div>", 1)[0]


def _outbox_row(**fields: Any) -> SagaOutboxMessage:
    return SagaOutboxMessage.objects.create(
        event_type="tests.ops.noted", payload={}, created_at=NOW - timedelta(hours=4), **fields
    )


def test_a_claimed_row_names_its_claimer_and_when_the_lease_ends() -> None:
    live = _dispatcher(timedelta(seconds=2), host="worker-4", pid=41)
    timer = _claimed(make_timer(make_saga("c-live"), due_at=NOW), live)

    shown = _fields(timer)

    assert shown["claimer"] == (
        'celery worker-4:41 until <time datetime="2026-03-02T12:04:00+00:00">'
        "2026-03-02 12:04:00 UTC</time>"
    )
    assert shown["claimer_heartbeat"] == "last pass 2 s ago"


def test_a_claimed_row_whose_claimer_is_stale_warns_with_the_idle_time_and_the_lease_end() -> None:
    dead = _dispatcher(timedelta(hours=3, seconds=20))
    row = _claimed(_outbox_row(), dead)

    heartbeat = _fields(row)["claimer_heartbeat"]

    assert heartbeat.startswith(f"<strong {WARNING}")
    assert "stale: last pass 3 h 0 min ago; the next pass claims the row again once its " in (
        heartbeat
    )
    assert "lease ends at <time" in heartbeat
    assert "2026-03-02 12:04:00 UTC</time>" in heartbeat


@pytest.mark.parametrize("outcome", ["fired", "canceled", "dead_lettered"])
def test_a_retired_timer_names_its_last_claimer_plainly_and_no_heartbeat(outcome: str) -> None:
    dead = _dispatcher(timedelta(hours=3))
    timer = make_timer(make_saga(f"c-{outcome}"), outcome=outcome, due_at=NOW)
    _claimed(timer, dead, until=NOW - timedelta(hours=3) + timedelta(minutes=5))

    shown = _fields(timer)

    assert shown == {
        "claimer": "nobody now; last claimed by celery worker-3:31",
        "claimer_heartbeat": "-",
    }


def test_a_delivered_outbox_row_names_its_last_claimer_plainly() -> None:
    dead = _dispatcher(timedelta(hours=3))
    # Retired with its lease not over: the stamp ends the claim, whatever the lease says.
    row = _claimed(_outbox_row(delivered_at=NOW - timedelta(hours=3)), dead)

    shown = _fields(row)

    assert shown["claimer"] == "nobody now; last claimed by celery worker-3:31"
    assert shown["claimer_heartbeat"] == "-"


def test_a_pending_row_whose_lease_ran_out_is_held_by_nobody() -> None:
    dead = _dispatcher(timedelta(hours=3))
    timer = make_timer(make_saga("c-lapsed"), due_at=NOW - timedelta(hours=3))
    _claimed(timer, dead, until=NOW - timedelta(minutes=1))

    shown = _fields(timer)

    assert shown["claimer"] == "nobody now; last claimed by celery worker-3:31"
    assert WARNING not in shown["claimer_heartbeat"]


def test_a_row_claimed_by_a_process_that_does_not_report_says_so_with_the_lease_end() -> None:
    timer = make_timer(make_saga("c-code"), due_at=NOW)
    SagaTimeout.objects.filter(pk=timer.pk).update(claimed_until=LEASE_ENDS)

    shown = _fields(timer)

    assert shown["claimer"].startswith("a process that does not report (code calling a drain)")
    assert "2026-03-02 12:04:00 UTC</time>" in shown["claimer"]
    assert shown["claimer_heartbeat"] == "-"


def test_a_row_that_no_claim_ever_took_shows_no_claimer() -> None:
    shown = _fields(make_timer(make_saga("c-never"), due_at=NOW + timedelta(days=1)))

    assert shown == {"claimer": "-", "claimer_heartbeat": "-"}
