"""``saga_status()``, ``manage.py saga_status`` and ``GET status/``: one set of numbers.

The prepared database holds every kind of row the numbers must tell apart; the PostgreSQL
test at the end checks that each query keeps to its partial index with a million retired
timers beside it.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from freezegun import freeze_time
from rest_framework.test import APIClient

from bsft_saga.models import (
    SagaDispatcher,
    SagaInstance,
    SagaKeptEvent,
    SagaOutboxMessage,
    SagaTimeout,
    TimeoutOutcome,
)
from bsft_saga.status import SagaStatus, dead_letters, due_timers, lag_seconds, saga_status
from tests.support.services import require_postgres_backend
from tests.testapp.ops_flows import make_saga, make_timer

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
STATUS_URL = "/api/sagas/status/"
KEYS = [
    "active_instances",
    "timeouts_pending",
    "timeouts_due",
    "timeouts_dead_lettered",
    "timeouts_unconfirmed",
    "outbox_undelivered",
    "outbox_scheduled",
    "outbox_dead_lettered",
    "lag_seconds",
    "events_kept",
    "kept_dead_lettered",
    "idle_seconds",
    "stale_after_seconds",
    "idle_warning",
    "dispatchers",
]


def make_outbox(
    *,
    created_at: datetime,
    delivered: bool = False,
    dead: bool = False,
    next_attempt_at: datetime | None = None,
    saga: SagaInstance | None = None,
    deliver_at: datetime | None = None,
) -> SagaOutboxMessage:
    return SagaOutboxMessage.objects.create(
        id=uuid.uuid4(),
        saga=saga,
        event_type="tests.ops.noted",
        payload={"note": ""},
        created_at=created_at,
        deliver_at=deliver_at,
        delivered_at=created_at if delivered else None,
        dead_lettered_at=created_at if dead else None,
        attempts=10 if dead else 0,
        next_attempt_at=next_attempt_at,
    )


@pytest.fixture
def every_kind_of_row() -> None:
    """Two active instances and one completed; timers and outbox rows in every state.

    The oldest late thing is the timer due 90 s ago (waiting for its retry back-off); the
    oldest due outbox row is 40 s old. Of the two delayed messages written a day
    ago, one came due 20 s ago (due), the other waits for another ten minutes.
    """
    active = make_saga("active-1", now=NOW - timedelta(hours=1))
    make_saga("active-2", now=NOW - timedelta(hours=1))
    done = make_saga("done", complete=True, now=NOW - timedelta(hours=2))

    make_timer(active, "later", due_at=NOW + timedelta(minutes=5))
    backing_off = make_timer(active, "backing-off", due_at=NOW - timedelta(seconds=90))
    SagaTimeout.objects.filter(pk=backing_off.pk).update(
        attempts=2, next_attempt_at=NOW + timedelta(seconds=20)
    )
    claimed = make_timer(active, "claimed", due_at=NOW - timedelta(seconds=30))
    SagaTimeout.objects.filter(pk=claimed.pk).update(
        claim_token=uuid.uuid4(), claimed_until=NOW + timedelta(minutes=5)
    )
    make_timer(active, "exactly-now", due_at=NOW)
    for outcome in (TimeoutOutcome.FIRED, TimeoutOutcome.MISSED, TimeoutOutcome.CANCELED):
        make_timer(done, str(outcome), outcome=outcome, due_at=NOW - timedelta(days=3))
    make_timer(done, "dead-1", outcome=TimeoutOutcome.DEAD_LETTERED)
    make_timer(active, "dead-2", outcome=TimeoutOutcome.DEAD_LETTERED)

    make_outbox(created_at=NOW - timedelta(seconds=40))
    make_outbox(created_at=NOW - timedelta(seconds=10), next_attempt_at=NOW + timedelta(minutes=1))
    make_outbox(created_at=NOW - timedelta(days=1), delivered=True)
    make_outbox(created_at=NOW - timedelta(days=2), dead=True, saga=done)
    make_outbox(created_at=NOW - timedelta(days=1), deliver_at=NOW - timedelta(seconds=20))
    make_outbox(created_at=NOW - timedelta(days=1), deliver_at=NOW + timedelta(minutes=10))


EXPECTED = SagaStatus(
    active_instances=2,
    timeouts_pending=4,
    timeouts_due=3,  # backing-off, claimed, exactly-now
    timeouts_dead_lettered=2,
    timeouts_unconfirmed=0,
    outbox_undelivered=3,
    outbox_scheduled=1,
    outbox_dead_lettered=1,
    lag_seconds=90.0,
)


# -- the service --------------------------------------------------------------------------


def test_status_counts_every_kind_of_row_as_api_md_defines_them(every_kind_of_row: None) -> None:
    assert saga_status(now=NOW) == EXPECTED


def test_status_reads_the_clock_when_no_time_is_given(every_kind_of_row: None) -> None:
    with freeze_time(NOW + timedelta(minutes=10)):
        status = saga_status()

    assert status.timeouts_due == 4  # "later" fell due too
    assert (status.outbox_undelivered, status.outbox_scheduled) == (4, 0)  # so did its message
    assert status.lag_seconds == 90.0 + 600.0


def test_the_dict_has_exactly_the_documented_keys_in_order(every_kind_of_row: None) -> None:
    assert list(saga_status(now=NOW).as_dict()) == KEYS


def test_an_empty_database_has_no_lag() -> None:
    status = saga_status(now=NOW)

    assert status.lag_seconds == 0
    assert status.as_dict() == {
        **dict.fromkeys(KEYS[:11], 0),
        "idle_seconds": None,
        "stale_after_seconds": 60.0,
        "idle_warning": "no dispatcher has reported",
        "dispatchers": [],
    }


def test_the_lag_counts_a_due_outbox_row_when_no_timer_is_due() -> None:
    make_timer(make_saga(), "later", due_at=NOW + timedelta(hours=1))
    make_outbox(created_at=NOW - timedelta(seconds=12))

    assert saga_status(now=NOW).lag_seconds == 12.0


def test_the_lag_counts_a_delayed_message_from_its_deliver_at() -> None:
    make_outbox(created_at=NOW - timedelta(days=3), deliver_at=NOW - timedelta(seconds=12))

    status = saga_status(now=NOW)
    assert (status.outbox_undelivered, status.outbox_scheduled) == (1, 0)
    assert status.lag_seconds == 12.0


def test_a_delayed_message_waiting_for_its_time_is_scheduled_and_adds_no_lag() -> None:
    make_outbox(created_at=NOW - timedelta(days=3), deliver_at=NOW + timedelta(days=30))

    status = saga_status(now=NOW)
    assert (status.outbox_undelivered, status.outbox_scheduled) == (0, 1)
    assert status.lag_seconds == 0


def test_a_timer_that_is_not_yet_due_adds_no_lag() -> None:
    make_timer(make_saga(), "later", due_at=NOW + timedelta(seconds=1))

    assert saga_status(now=NOW).lag_seconds == 0


def test_a_requeued_dead_letter_is_pending_and_no_longer_counted_as_dead() -> None:
    from bsft_saga.timeouts.maintenance import requeue_dead_lettered

    row = make_timer(make_saga(), outcome=TimeoutOutcome.DEAD_LETTERED, due_at=NOW)
    requeue_dead_lettered([row.pk])

    status = saga_status(now=NOW + timedelta(seconds=5))
    assert (status.timeouts_dead_lettered, status.timeouts_due) == (0, 1)
    assert status.lag_seconds == 5.0


def test_the_single_numbers_agree_with_the_snapshot(every_kind_of_row: None) -> None:
    assert due_timers(now=NOW) == EXPECTED.timeouts_due
    assert lag_seconds(now=NOW) == EXPECTED.lag_seconds
    assert dead_letters() == EXPECTED.dead_letters == 3


def test_status_runs_a_fixed_number_of_queries_however_many_rows(every_kind_of_row: None) -> None:
    with CaptureQueriesContext(connection) as few:
        saga_status(now=NOW)
    for n in range(30):
        make_timer(make_saga(f"more-{n}"), due_at=NOW - timedelta(seconds=n))

    with CaptureQueriesContext(connection) as many:
        saga_status(now=NOW)

    assert len(many) == len(few) == 10


# -- the command --------------------------------------------------------------------------


def run(*args: str) -> str:
    out = StringIO()
    call_command("saga_status", *args, stdout=out)
    return out.getvalue()


def test_the_command_prints_json_with_the_keys_of_the_route(every_kind_of_row: None) -> None:
    with freeze_time(NOW):
        document = json.loads(run("--format", "json"))

    assert document == EXPECTED.as_dict()


def test_the_command_prints_one_key_value_line_per_number_by_default(
    every_kind_of_row: None,
) -> None:
    with freeze_time(NOW):
        lines = run().splitlines()

    # Then the dispatchers (none here, which the last line says).
    assert [line.split()[0] for line in lines[:-1]] == [k for k in KEYS if k != "idle_warning"]
    assert lines[0].split() == ["active_instances", "2"]
    assert lines[8].split() == ["lag_seconds", "90.000"]
    assert lines[9].split() == ["events_kept", "0"]
    assert lines[10].split() == ["kept_dead_lettered", "0"]
    assert lines[-3].split() == ["stale_after_seconds", "60.000"]
    assert lines[-2].split() == ["dispatchers", "0"]
    assert lines[-1] == "no dispatcher has reported"


def test_max_lag_fails_when_the_lag_is_strictly_greater(every_kind_of_row: None) -> None:
    with freeze_time(NOW), pytest.raises(CommandError, match=r"lag_seconds=90\.000 .*--max-lag 60"):
        run("--max-lag", "60")


def test_max_lag_exits_with_status_1(every_kind_of_row: None) -> None:
    from django.core.management import ManagementUtility

    with freeze_time(NOW), pytest.raises(SystemExit) as exit_:
        ManagementUtility(["manage.py", "saga_status", "--max-lag", "89.5"]).execute()

    assert exit_.value.code == 1


@pytest.mark.parametrize("limit", ["90", "90.0", "3600"])
def test_max_lag_passes_when_the_lag_is_not_greater(every_kind_of_row: None, limit: str) -> None:
    with freeze_time(NOW):
        assert "lag_seconds" in run("--max-lag", limit, "--format", "json")


@pytest.mark.parametrize("limit", ["-1", "nan", "inf"])
def test_max_lag_must_be_a_finite_number_of_seconds(limit: str) -> None:
    with pytest.raises(CommandError, match="--max-lag must be a number of seconds"):
        run("--max-lag", limit)


def test_max_lag_rejects_what_is_not_a_number() -> None:
    with pytest.raises(CommandError, match="--max-lag"):
        run("--max-lag", "a minute")


# -- the route ----------------------------------------------------------------------------


def _client(*codenames: str) -> APIClient:
    user = User.objects.create_user(f"user-{len(codenames)}-{uuid.uuid4().hex[:6]}")
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="bsft_saga", codename__in=codenames)
    )
    client = APIClient()
    client.force_login(user)
    return client


def test_the_route_serves_the_same_document_to_users_who_may_view_sagas(
    every_kind_of_row: None,
) -> None:
    with freeze_time(NOW):
        response = _client("view_sagainstance").get(STATUS_URL)

    assert response.status_code == 200
    assert response.json() == EXPECTED.as_dict()


def test_the_route_refuses_users_without_the_view_permission() -> None:
    assert _client("view_sagatimeout").get(STATUS_URL).status_code == 403


def test_the_route_refuses_anonymous_requests() -> None:
    assert APIClient().get(STATUS_URL).status_code in (401, 403)


def test_the_schema_documents_the_route_and_carries_the_package_version() -> None:
    from bsft_saga import __version__

    document = _client("view_sagainstance").get("/api/sagas/schema/", {"format": "json"}).json()

    assert document["info"]["version"] == __version__
    response = document["paths"]["/status/"]["get"]["responses"]["200"]
    schema_ref = response["content"]["application/json"]["schema"]["$ref"]
    properties = document["components"]["schemas"][schema_ref.rsplit("/", 1)[1]]["properties"]
    assert list(properties) == KEYS


# -- the plans, on PostgreSQL -------------------------------------------------------------

RETIRED_TIMERS = 1_000_000
COMPLETED_INSTANCES = 100_000
DELIVERED_OUTBOX_ROWS = 100_000


def _fill_with_history() -> None:
    """A million retired timers over 100,000 completed instances, 100,000 delivered outbox
    rows, plus a handful of live rows; one INSERT ... SELECT generate_series per table."""
    instance = SagaInstance._meta.db_table
    timeout = SagaTimeout._meta.db_table
    outbox = SagaOutboxMessage._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO {instance} (id, saga_type, correlation_key, state_type, state,
                step_index, is_complete, created_at, updated_at, completed_at, version,
                flow_version, terminated_reason)
            SELECT gen_random_uuid(), 'tests.ops.reminder', 'old-' || g, 'x', '{{}}', 2, true,
                %s - g * interval '1 second', %s, %s, 2, 1, ''
            FROM generate_series(1, %s) AS g
            """,
            [NOW, NOW, NOW, COMPLETED_INSTANCES],
        )
        cursor.execute(
            f"""
            INSERT INTO {timeout} (saga_id, name, due_at, event_type, payload, message_id,
                calendar_key, correlation_id, scope, scheduled_step_index, scheduled_at,
                attempts, last_error, dispatched_at, outcome, dead_letter_reason)
            SELECT s.id, 'remind-' || g, %s - g * interval '1 second', 'tests.ops.reminder-due',
                '{{}}', gen_random_uuid(), '', '', 'saga', 1, %s, 0, '',
                %s - g * interval '1 second', 'fired', ''
            FROM generate_series(1, %s) AS g
            JOIN (SELECT id, row_number() OVER () AS n FROM {instance}) AS s
              ON s.n = 1 + g %% %s
            """,
            [NOW, NOW, NOW, RETIRED_TIMERS, COMPLETED_INSTANCES],
        )
        cursor.execute(
            f"""
            INSERT INTO {outbox} (id, event_type, payload, correlation_id, created_at,
                delivered_at, attempts, last_error)
            SELECT gen_random_uuid(), 'tests.ops.noted', '{{}}', '',
                %s - g * interval '1 second', %s, 1, ''
            FROM generate_series(1, %s) AS g
            """,
            [NOW, NOW, DELIVERED_OUTBOX_ROWS],
        )
    live = make_saga("live", now=NOW)
    make_timer(live, "due", due_at=NOW - timedelta(seconds=5))
    make_timer(live, "later", due_at=NOW + timedelta(hours=1))
    make_timer(live, "dead", outcome=TimeoutOutcome.DEAD_LETTERED)
    make_outbox(created_at=NOW - timedelta(seconds=3))
    make_outbox(created_at=NOW - timedelta(days=1), dead=True)
    make_outbox(created_at=NOW - timedelta(days=1), deliver_at=NOW + timedelta(days=1))
    with connection.cursor() as cursor:
        for table in (instance, timeout, outbox):
            cursor.execute(f"ANALYZE {table}")


INDEXED_SCANS = {"Index Scan", "Index Only Scan", "Bitmap Heap Scan"}


def _plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan, *(node for child in plan.get("Plans", []) for node in _plan_nodes(child))]


@pytest.mark.postgres
@pytest.mark.slow
def test_every_status_query_reads_a_partial_index_beside_a_million_retired_timers() -> None:
    require_postgres_backend()
    _fill_with_history()

    with CaptureQueriesContext(connection) as queries:
        status = saga_status(now=NOW)

    assert (status.timeouts_pending, status.timeouts_due, status.lag_seconds) == (2, 1, 5.0)
    assert (status.outbox_undelivered, status.outbox_scheduled) == (1, 1)
    assert (status.active_instances, status.dead_letters) == (1, 2)
    big_tables = {
        SagaInstance._meta.db_table,
        SagaTimeout._meta.db_table,
        SagaOutboxMessage._meta.db_table,
    }
    # Kept events are in play by definition (applied or discarded rows are deleted), so
    # their table stays small and its count needs no index; so do the dispatchers' rows,
    # which their purge prunes.
    small_tables = (SagaKeptEvent._meta.db_table, SagaDispatcher._meta.db_table)
    with connection.cursor() as cursor:
        for query in queries.captured_queries:
            if any(table in query["sql"] for table in small_tables):
                continue
            cursor.execute("EXPLAIN (FORMAT JSON) " + query["sql"])
            nodes = _plan_nodes(cursor.fetchone()[0][0]["Plan"])
            scans = [node["Node Type"] for node in nodes if node.get("Relation Name") in big_tables]
            indexes = {node["Index Name"] for node in nodes if "Index Name" in node}
            assert scans, query["sql"]
            assert set(scans) <= INDEXED_SCANS, (query["sql"], nodes)
            assert indexes, (query["sql"], nodes)
            assert all(name.startswith("bsft_saga_") for name in indexes), (query["sql"], nodes)
