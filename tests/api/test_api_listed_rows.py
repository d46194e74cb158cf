"""Kept events and delayed messages over HTTP: the detail lists at most 50 of each with how
many there are in all; ``instances/<id>/kept-events/`` and ``instances/<id>/delayed-messages/``
page through them all.

5,000 kept rows made the detail (and the admin page) megabytes long; the detail's size and
its number of queries no longer grow with them.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from freezegun import freeze_time
from rest_framework.test import APIClient

from bsft_saga.api.serializers import DELAYED_MESSAGE_FIELDS, KEPT_EVENT_FIELDS
from bsft_saga.audit import READ_CONTENT
from bsft_saga.listing import ROWS_LISTED
from bsft_saga.models import SagaAuditRecord, SagaInstance, SagaOutboxMessage
from tests.api.test_api import _docs_example
from tests.support.listed_rows import KEPT_SECRET, delay_many, keep_many
from tests.testapp.ops_flows import make_saga

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
VIEW = "view_sagainstance"
READ = "read_saga_content"
MANY_KEPT = 5_000


def client_with(*codenames: str) -> APIClient:
    user = User.objects.create_user(f"user-{uuid.uuid4().hex[:8]}")
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="bsft_saga", codename__in=codenames)
    )
    client = APIClient()
    client.force_login(user)
    return client


def url(name: str, saga: SagaInstance | str) -> str:
    pk = saga if isinstance(saga, str) else saga.pk
    return reverse(f"bsft_saga:instance-{name}", kwargs={"pk": pk})


@pytest.fixture(autouse=True)
def frozen() -> Any:
    with freeze_time(T0) as clock:
        yield clock


@pytest.fixture
def reader() -> APIClient:
    return client_with(VIEW, READ)


@pytest.fixture
def crowded() -> dict[str, Any]:
    """A saga with 5,000 kept events and 60 delayed messages waiting, one delivered and one
    whose time has come (neither of those two is waiting)."""
    saga = make_saga("crowded", now=T0)
    kept = keep_many(saga, MANY_KEPT, now=T0 - timedelta(days=1))
    delayed = delay_many(saga, ROWS_LISTED + 10, now=T0)
    SagaOutboxMessage.objects.create(
        saga=saga, event_type="tests.ops.noted", payload={}, created_at=T0, deliver_at=T0
    )
    SagaOutboxMessage.objects.create(
        saga=saga,
        event_type="tests.ops.noted",
        payload={},
        created_at=T0,
        deliver_at=T0 + timedelta(days=1),
        delivered_at=T0,
    )
    return {"saga": saga, "kept": kept, "delayed": [str(pk) for pk in delayed]}


# --- the detail -------------------------------------------------------------------------


def test_the_detail_lists_the_50_oldest_kept_events_and_counts_them_all(
    reader: APIClient, crowded: dict[str, Any]
) -> None:
    body = reader.get(url("detail", crowded["saga"])).json()

    kept = body["kept_events"]
    assert len(kept) == ROWS_LISTED
    assert [row["kept_at"] for row in kept] == sorted(row["kept_at"] for row in kept)
    assert kept[0]["payload"]["n"] == 0  # the oldest: applied first
    assert kept[-1]["payload"]["n"] == ROWS_LISTED - 1
    assert body["kept_events_total"] == MANY_KEPT


def test_the_detail_lists_the_50_soonest_delayed_messages_and_counts_those_waiting(
    reader: APIClient, crowded: dict[str, Any]
) -> None:
    body = reader.get(url("detail", crowded["saga"])).json()

    assert [row["id"] for row in body["delayed_messages"]] == crowded["delayed"][:ROWS_LISTED]
    assert body["delayed_messages_total"] == ROWS_LISTED + 10


def test_a_small_instance_lists_everything_and_counts_nothing_more(reader: APIClient) -> None:
    saga = make_saga("small", now=T0)
    keep_many(saga, 2, now=T0)
    delay_many(saga, 1, now=T0)

    body = reader.get(url("detail", saga)).json()

    assert (len(body["kept_events"]), body["kept_events_total"]) == (2, 2)
    assert (len(body["delayed_messages"]), body["delayed_messages_total"]) == (1, 1)


def test_the_detail_runs_as_many_queries_for_5000_kept_events_as_for_60(
    reader: APIClient,
) -> None:
    few, many = make_saga("few", now=T0), make_saga("many", now=T0)
    keep_many(few, ROWS_LISTED + 10, now=T0)
    delay_many(few, ROWS_LISTED + 10, now=T0)
    keep_many(many, MANY_KEPT, now=T0)
    delay_many(many, 2 * ROWS_LISTED, now=T0)
    reader.get(url("detail", few))  # the session and permission caches warm up

    with CaptureQueriesContext(connection) as for_few:
        small = reader.get(url("detail", few))
    with CaptureQueriesContext(connection) as for_many:
        large = reader.get(url("detail", many))

    assert small.status_code == large.status_code == 200
    assert len(for_many) == len(for_few)
    assert len(large.content) < 2 * len(small.content)


# --- the kept event route ---------------------------------------------------------------


def test_the_kept_route_pages_through_every_kept_event_oldest_first_with_payloads(
    reader: APIClient, crowded: dict[str, Any]
) -> None:
    first = reader.get(url("kept-events", crowded["saga"]), {"page_size": 500}).json()
    last = reader.get(url("kept-events", crowded["saga"]), {"page_size": 500, "page": 10}).json()

    assert first["count"] == MANY_KEPT
    assert [row["payload"]["n"] for row in first["results"]] == list(range(500))
    assert [row["payload"]["n"] for row in last["results"]] == list(range(4_500, MANY_KEPT))
    assert last["next"] is None
    assert set(first["results"][0]) == set(KEPT_EVENT_FIELDS)
    assert first["results"][0]["payload"]["label"] == KEPT_SECRET


def test_each_page_of_the_kept_route_is_audited_and_a_miss_is_not(
    reader: APIClient, crowded: dict[str, Any]
) -> None:
    saga = crowded["saga"]
    reader.get(url("kept-events", saga))
    reader.get(url("kept-events", saga), {"page": 2})
    assert reader.get(url("kept-events", saga), {"page": 999}).status_code == 404
    assert reader.get(url("kept-events", str(uuid.uuid4()))).status_code == 404

    records = list(SagaAuditRecord.objects.all())
    assert [(r.action, r.instance_id) for r in records] == [(READ_CONTENT, saga.pk)] * 2


@pytest.mark.parametrize(
    "codenames", [(), (VIEW,), (READ,)], ids=["nothing", "view-only", "content-only"]
)
def test_the_kept_route_needs_both_permissions_like_the_detail(
    crowded: dict[str, Any], codenames: tuple[str, ...]
) -> None:
    response = client_with(*codenames).get(url("kept-events", crowded["saga"]))

    assert response.status_code == 403
    assert KEPT_SECRET not in response.content.decode()
    assert not SagaAuditRecord.objects.exists()


def test_without_a_content_permission_the_kept_route_is_unmapped(
    reader: APIClient, crowded: dict[str, Any]
) -> None:
    with override_settings(BSFT_SAGA={"API": {"READ_CONTENT_PERMISSION": None}}):
        response = reader.get(url("kept-events", crowded["saga"]))

    assert response.status_code == 404
    assert not SagaAuditRecord.objects.exists()


# --- the delayed message route ----------------------------------------------------------


def test_the_delayed_route_pages_through_the_waiting_messages_soonest_first(
    crowded: dict[str, Any],
) -> None:
    viewer = client_with(VIEW)
    first = viewer.get(url("delayed-messages", crowded["saga"])).json()
    second = viewer.get(first["next"]).json()

    assert first["count"] == ROWS_LISTED + 10
    listed = [row["id"] for row in first["results"] + second["results"]]
    assert listed == crowded["delayed"]
    assert set(first["results"][0]) == set(DELAYED_MESSAGE_FIELDS)  # no payload


def test_the_delayed_route_is_metadata_not_audited_and_served_without_content_reading(
    crowded: dict[str, Any],
) -> None:
    viewer = client_with(VIEW)
    with override_settings(BSFT_SAGA={"API": {"READ_CONTENT_PERMISSION": None}}):
        response = viewer.get(url("delayed-messages", crowded["saga"]))

    assert response.status_code == 200
    assert not SagaAuditRecord.objects.exists()
    assert client_with().get(url("delayed-messages", crowded["saga"])).status_code == 403
    assert APIClient().get(url("delayed-messages", crowded["saga"])).status_code in (401, 403)
    assert viewer.get(url("delayed-messages", "not-a-uuid")).status_code == 404


def test_a_message_whose_time_has_come_leaves_the_delayed_route(reader: APIClient) -> None:
    saga = make_saga("soon", now=T0)
    [_soon, later] = delay_many(saga, 2, now=T0)

    with freeze_time(T0 + timedelta(hours=1)):
        listed = reader.get(url("delayed-messages", saga)).json()

    assert [row["id"] for row in listed["results"]] == [str(later)]


# --- the schema -------------------------------------------------------------------------


def test_the_schema_documents_both_routes_as_pages_and_the_totals() -> None:
    schema = APIClient().get(reverse("bsft_saga:schema"), {"format": "json"}).json()
    paths, components = schema["paths"], schema["components"]["schemas"]

    for path, row in [
        ("/instances/{id}/kept-events/", "SagaKeptEvent"),
        ("/instances/{id}/delayed-messages/", "SagaDelayedMessage"),
        ("/instances/{id}/timeouts/", "SagaTimeout"),
    ]:
        response = paths[path]["get"]["responses"]["200"]["content"]["application/json"]
        assert response["schema"]["$ref"] == f"#/components/schemas/Paginated{row}List"
    detail = components["SagaInstanceDetail"]["properties"]
    assert {"kept_events_total", "delayed_messages_total"} <= set(detail)


# --- the docs ---------------------------------------------------------------------------


def test_the_documented_kept_event_shows_the_real_field_names(reader: APIClient) -> None:
    saga = make_saga("documented", now=T0)
    keep_many(saga, 1, now=T0)
    [kept] = reader.get(url("detail", saga)).json()["kept_events"]

    documented = json.loads(_docs_example('"kept_at": "2026', "json"))

    assert set(documented) == set(kept)
