"""Datetimes bsft_saga stores: refused where they enter when out of range, and a row that
holds one anyway (stored by an earlier release, or by hand) still shows on every page.

Python's ``datetime`` ends at 9999-12-31 and psycopg reads no timestamp after it, so
``9999-12-31T23:00-15:00`` (year 10000 in UTC) used to be stored by PostgreSQL and then
fail every page that read it, while SQLite's adapter raised ``OverflowError`` at publish.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from freezegun.api import FrozenDateTimeFactory

from bsft_saga import publish
from bsft_saga.db.datetimes import EARLIEST, LATEST, storable
from bsft_saga.delivery.report import DeliveryReport
from bsft_saga.models import SagaInstance, SagaOutboxMessage, SagaTimeout, TimeoutOutcome
from bsft_saga.outbox import deliver_pending
from bsft_saga.signals import deferred_event_committed
from bsft_saga.status import saga_status
from bsft_saga.tasks import _enqueue_delivery
from bsft_saga.timeouts import DrainReport, drain_due
from tests.support.admin import admin_url, staff_client
from tests.testapp.dispatch_events import InvoiceSent
from tests.testapp.events import QuoteSent
from tests.testapp.ops_flows import make_saga, make_timer
from tests.testapp.timer_events import ProbePoked, ProbeStarted
from tests.testapp.timer_flows import ProbeFlow, schedule_probe_due, timers_of

pytestmark = pytest.mark.django_db

#: Year 10000 in UTC: PostgreSQL stores it, psycopg cannot read it back.
AFTER_THE_RANGE = datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-15)))
#: Year 0 in UTC.
BEFORE_THE_RANGE = datetime(1, 1, 1, 1, tzinfo=timezone(timedelta(hours=2)))
OUT_OF_RANGE = [
    pytest.param(AFTER_THE_RANGE, id="year-10000-in-utc"),
    pytest.param(BEFORE_THE_RANGE, id="year-0-in-utc"),
    pytest.param(datetime(9999, 1, 1, tzinfo=UTC), id="year-9999"),
    pytest.param(datetime(1, 1, 1, 12, tzinfo=UTC), id="0001-01-01"),
]


# --- refused where they enter ------------------------------------------------------------


@pytest.mark.parametrize("defer", [False, True])
@pytest.mark.parametrize("deadline", OUT_OF_RANGE)
def test_publish_refuses_a_deadline_outside_the_stored_range(
    deadline: datetime, defer: bool
) -> None:
    with pytest.raises(
        ValueError, match=r"publish\(tests\.quote\.sent\): deadline .* out of range"
    ):
        publish(QuoteSent("q-far"), deadline=deadline, defer=defer)

    assert not SagaOutboxMessage.objects.exists()
    assert not SagaInstance.objects.exists()


def test_a_deadline_at_either_end_of_the_range_is_stored_and_read_back() -> None:
    for deadline in (EARLIEST, LATEST.astimezone(timezone(timedelta(hours=14)))):
        envelope = publish(QuoteSent("q-edge"), deadline=deadline, defer=True)

        assert SagaOutboxMessage.objects.get(pk=envelope.message_id).deadline == deadline


@pytest.mark.parametrize(
    ("when", "problem"),
    [
        *(
            pytest.param(*when.values, "due_at .* out of range", id=when.id)
            for when in OUT_OF_RANGE
        ),
        pytest.param(timedelta(days=999_999_999), "the delay .* runs past", id="max-delay"),
        pytest.param(timedelta(days=3_000_000), "the delay .* runs past", id="3M-days"),
    ],
)
def test_schedule_timeout_refuses_a_due_time_outside_the_stored_range(
    action: Callable[..., str], when: datetime | timedelta, problem: str
) -> None:
    name = action(schedule_probe_due("far", when))

    with pytest.raises(ValueError, match=rf"schedule_timeout\('far'\): {problem}"):
        publish(ProbeStarted("p-far", name))

    assert not SagaInstance.objects.exists()


def test_a_due_time_inside_the_range_is_scheduled(action: Callable[..., str]) -> None:
    when = datetime(9998, 12, 31, 12, tzinfo=UTC)
    publish(ProbeStarted("p-late", action(schedule_probe_due("late", when))))

    [timer] = timers_of(ProbeFlow, "p-late")
    assert timer.due_at == when


def test_the_check_names_the_field_and_refuses_a_naive_value() -> None:
    with pytest.raises(ValueError, match="here: due_at must be an aware datetime"):
        storable(datetime(2026, 1, 1), field="due_at", where="here")
    with pytest.raises(TypeError, match="here: due_at must be an aware datetime, got str"):
        storable("2026-01-01", field="due_at", where="here")


# --- a stored row that cannot be read still shows -----------------------------------------

#: Year 10000, as an earlier release stored it on PostgreSQL; as text, by hand, on SQLite.
UNREADABLE = "10000-01-01 00:00:00"


def store_unreadable(model: type[Any], pk: Any, column: str) -> None:
    """Write ``UNREADABLE`` into ``column`` behind the ORM's back."""
    if connection.vendor == "mysql":
        pytest.skip(
            "MariaDB and MySQL refuse a datetime after year 9999 or before year 1 when it is "
            "written: no stored value can be unreadable there"
        )
    table = model._meta.db_table
    key = pk.hex if connection.vendor == "sqlite" and hasattr(pk, "hex") else pk
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {table} SET {column} = '{UNREADABLE}' WHERE id = %s", [key])


@pytest.fixture
def unreadable() -> SagaTimeout:
    """A pending timer due in year 10000, of a saga whose deadline is year 10000."""
    saga = make_saga("far-away")
    make_timer(saga, "readable")
    timer = make_timer(saga, "far")
    store_unreadable(SagaTimeout, timer.pk, "due_at")
    store_unreadable(SagaInstance, saga.pk, "deadline")
    return timer


MARK = "unreadable, stored as 10000-01-01"


@pytest.mark.parametrize(
    "page",
    ["timer list", "timer page", "instance list", "instance page", "timers of the instance"],
)
def test_admin_pages_show_a_date_that_cannot_be_read_as_unreadable(
    unreadable: SagaTimeout, page: str
) -> None:
    saga = unreadable.saga
    timers = admin_url("sagatimeout", "changelist")
    url = {
        "timer list": timers,
        "timer page": admin_url("sagatimeout", "change", unreadable.pk),
        "instance list": admin_url("sagainstance", "changelist"),
        "instance page": admin_url("sagainstance", "change", saga.pk),
        "timers of the instance": f"{timers}?saga__id__exact={saga.pk}",
    }[page]
    if page == "instance list":
        # The list shows when each instance last moved, not its deadline.
        store_unreadable(SagaInstance, saga.pk, "updated_at")
    client = staff_client("root", superuser=True)

    response = client.get(url)

    assert response.status_code == 200
    assert MARK in response.content.decode()


def test_the_timer_list_still_lists_and_counts_the_row(unreadable: SagaTimeout) -> None:
    client = staff_client("root", superuser=True)

    response = client.get(admin_url("sagatimeout", "changelist"))

    listed = {timer.name: timer for timer in response.context["cl"].result_list}
    assert set(listed) == {"readable", "far"}
    assert listed["readable"].due_at == SagaTimeout.objects.get(name="readable").due_at


def test_the_api_detail_serves_an_unreadable_date_as_null_and_names_it(
    unreadable: SagaTimeout,
) -> None:
    client = staff_client("root", superuser=True)

    body = client.get(f"/api/sagas/instances/{unreadable.saga_id}/").json()

    assert (body["deadline"], body["unreadable_fields"]) == (None, ["deadline"])
    timers = {timer["name"]: timer for timer in body["timeouts"]}
    assert (timers["far"]["due_at"], timers["far"]["unreadable_fields"]) == (None, ["due_at"])
    assert timers["readable"]["due_at"] is not None
    assert "unreadable_fields" not in timers["readable"]


@pytest.mark.parametrize("route", ["instances/", "instances/{saga}/timeouts/"])
def test_the_other_api_routes_serve_the_row_too(unreadable: SagaTimeout, route: str) -> None:
    client = staff_client("root", superuser=True)

    response = client.get("/api/sagas/" + route.format(saga=unreadable.saga_id))

    assert response.status_code == 200
    [row] = [row for row in response.json()["results"] if "unreadable_fields" in row]
    assert row["unreadable_fields"] in (["deadline"], ["due_at"])


def test_firing_an_unreadable_timer_now_makes_it_readable_again(unreadable: SagaTimeout) -> None:
    client: Client = staff_client("root", superuser=True)

    client.post(
        admin_url("sagatimeout", "changelist"),
        {"action": "fire_now", "_selected_action": [str(unreadable.pk)]},
    )

    assert SagaTimeout.objects.get(pk=unreadable.pk).due_at <= datetime.now(UTC)


def test_a_pass_dead_letters_an_unreadable_outbox_row_and_delivers_the_healthy_ones(
    record: Any,
) -> None:
    delivered = record(ProbePoked)
    publish(ProbeStarted("p-bad"))
    deferred_event_committed.disconnect(dispatch_uid="bsft_saga.tasks.enqueue")
    try:  # left to the drain, as when the broker was down
        bad = publish(ProbePoked("p-bad"), defer=True)
        healthy = [publish(ProbePoked(f"p-{i}"), defer=True) for i in range(3)]
    finally:
        deferred_event_committed.connect(_enqueue_delivery, dispatch_uid="bsft_saga.tasks.enqueue")
    store_unreadable(SagaOutboxMessage, bad.message_id, "deadline")

    report = deliver_pending()

    if connection.vendor == "sqlite":  # its converter reads the value as null: no blocker
        assert (report.delivered, report.dead_lettered) == (4, 0)
        return
    assert (report.delivered, report.dead_lettered) == (3, 1)
    assert sorted(e.message_id for e in delivered.envelopes) == sorted(
        e.message_id for e in healthy
    )
    row = SagaOutboxMessage.objects.filter(pk=bad.message_id)
    assert row.values_list("last_error", flat=True).get().startswith("Unreadable: ")
    assert row.exclude(dead_lettered_at=None).exists()
    assert deliver_pending() == DeliveryReport()  # nothing left to block a pass


def test_a_pass_dead_letters_a_timer_whose_saga_cannot_be_read_and_fires_the_rest(
    clock: FrozenDateTimeFactory,
) -> None:
    for key in ("inv-bad", "inv-1", "inv-2"):
        publish(InvoiceSent(key))
    bad = SagaInstance.objects.get(correlation_key="inv-bad")
    store_unreadable(SagaInstance, bad.pk, "deadline")

    report = drain_due()

    if connection.vendor == "sqlite":  # its converter reads the value as null: no blocker
        assert (report.fired, report.dead_lettered) == (3, 0)
        return
    assert (report.fired, report.dead_lettered) == (2, 1)
    timer = SagaTimeout.objects.filter(saga_id=bad.pk).values("outcome", "last_error").get()
    assert timer["outcome"] == TimeoutOutcome.DEAD_LETTERED
    assert timer["last_error"].startswith("Unreadable: ")
    assert drain_due() == DrainReport()


def test_the_status_counts_skip_a_due_time_that_cannot_be_read(unreadable: SagaTimeout) -> None:
    status = saga_status()

    # The far timer is pending but not late (its due time cannot be read; on SQLite, where
    # dates are text, it used to sort as due and fail the MIN() of every status page); its
    # readable sibling, due now, is.
    assert (status.timeouts_pending, status.timeouts_due) == (2, 1)
    assert status.lag_seconds < 60
