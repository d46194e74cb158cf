"""The HTTP read surface: who may list and read sagas, what the rows say, the audit of reads.

Instances are created the way users create them, by publishing events of the test app's
flows at frozen times; the examples of docs/http.md are run here too.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import types
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import Group, Permission, User
from django.test import override_settings
from django.urls import reverse
from django.utils.dateparse import parse_datetime
from freezegun import freeze_time
from rest_framework.test import APIClient

from bsft_saga import publish
from bsft_saga.api.serializers import INSTANCE_FIELDS, TIMER_FIELDS
from bsft_saga.audit import READ_CONTENT
from bsft_saga.models import SagaAuditRecord, SagaInstance, SagaOutboxMessage
from tests.support.deploys import running_release
from tests.testapp.delayed_events import InvoiceIssued
from tests.testapp.delayed_flows import REMINDER_DELAY, InvoiceFlow
from tests.testapp.engine_events import ProbeStarted
from tests.testapp.events import (
    OrderCanceled,
    OrderPlaced,
    Ping,
    QuoteAccepted,
    QuoteSent,
    StockReserved,
)
from tests.testapp.flows import OrderFlow
from tests.testapp.parcel_events import ParcelOrdered
from tests.testapp.parcel_flows import ParcelFlowV1
from tests.testapp.timer_flows import QuoteFlow

pytestmark = pytest.mark.django_db

PREFIX = "/api/sagas/"
LIST = PREFIX + "instances/"
SCHEMA = PREFIX + "schema/"
VIEW = "bsft_saga.view_sagainstance"
READ = "bsft_saga.read_saga_content"
T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
DOCS = Path(__file__).resolve().parents[2] / "docs" / "http.md"


# --- builders --------------------------------------------------------------------------


def detail(instance_id: Any) -> str:
    return f"{LIST}{instance_id}/"


def make_user(*perms: str, username: str = "operator") -> User:
    user = User.objects.create_user(username)
    for perm in perms:
        app_label, codename = perm.split(".")
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label=app_label, codename=codename)
        )
    return user


def client_for(user: User | None) -> APIClient:
    client = APIClient()
    if user is not None:
        client.force_login(user)
    return client


def publish_at(moment: datetime, event: Any) -> None:
    with freeze_time(moment):
        publish(event)


def instance(flow: Any, key: str) -> SagaInstance:
    return SagaInstance.objects.filter(saga_type=flow.saga_type, correlation_key=key).latest(
        "created_at"
    )


def keys_of(response: Any) -> list[str]:
    assert response.status_code == 200, response.content
    return [row["correlation_key"] for row in response.json()["results"]]


@pytest.fixture
def operator() -> User:
    return make_user(VIEW, READ)


@pytest.fixture
def reader(operator: User) -> APIClient:
    return client_for(operator)


@pytest.fixture
def three_sagas() -> None:
    """o-1 (order, advanced at T0+3h), q-1 (quote, T0+1h), o-2 (order, canceled at T0+4h).

    Created in the order o-1, q-1, o-2; last moved in the order q-1, o-1, o-2.
    """
    publish_at(T0, OrderPlaced("o-1", Decimal("250.00")))
    publish_at(T0 + timedelta(hours=1), QuoteSent("q-1"))
    publish_at(T0 + timedelta(hours=2), OrderPlaced("o-2", Decimal("10.00")))
    publish_at(T0 + timedelta(hours=3), StockReserved("o-1"))
    publish_at(T0 + timedelta(hours=4), OrderCanceled("o-2"))


# --- permissions ------------------------------------------------------------------------


def test_anonymous_requests_are_refused_on_both_routes() -> None:
    publish(OrderPlaced("o-1"))
    anonymous = client_for(None)

    assert anonymous.get(LIST).status_code in (401, 403)
    assert anonymous.get(detail(instance(OrderFlow, "o-1").pk)).status_code in (401, 403)


def test_listing_needs_the_view_permission() -> None:
    publish(OrderPlaced("o-1"))

    assert client_for(make_user(READ)).get(LIST).status_code == 403


def test_reading_content_needs_the_view_permission_too() -> None:
    publish(OrderPlaced("o-1"))

    response = client_for(make_user(READ)).get(detail(instance(OrderFlow, "o-1").pk))

    assert response.status_code == 403


def test_reading_content_needs_the_read_content_permission() -> None:
    publish(OrderPlaced("o-1"))
    viewer = client_for(make_user(VIEW))

    assert viewer.get(LIST).status_code == 200
    assert viewer.get(detail(instance(OrderFlow, "o-1").pk)).status_code == 403


def test_the_read_content_permission_is_the_one_the_setting_names() -> None:
    publish(OrderPlaced("o-1"))
    client = client_for(make_user(VIEW, "auth.view_user"))
    url = detail(instance(OrderFlow, "o-1").pk)

    assert client.get(url).status_code == 403
    with override_settings(BSFT_SAGA={"API": {"READ_CONTENT_PERMISSION": "auth.view_user"}}):
        assert client.get(url).status_code == 200


def test_a_superuser_reads_both_routes() -> None:
    publish(OrderPlaced("o-1"))
    admin = client_for(User.objects.create_superuser("root"))

    assert admin.get(LIST).status_code == 200
    assert admin.get(detail(instance(OrderFlow, "o-1").pk)).status_code == 200


# --- the list: rows ---------------------------------------------------------------------


def test_list_rows_carry_the_model_field_names_and_no_state(reader: APIClient) -> None:
    publish_at(T0, OrderPlaced("o-1", Decimal("250.00")))
    publish_at(T0 + timedelta(hours=1), StockReserved("o-1"))
    saga = instance(OrderFlow, "o-1")

    [row] = reader.get(LIST).json()["results"]

    assert set(row) == {
        "id",
        "saga_type",
        "correlation_key",
        "state_type",
        "step_index",
        "flow_version",
        "is_complete",
        "created_at",
        "updated_at",
        "completed_at",
        "deadline",
        "version",
    }
    assert row["id"] == str(saga.pk)
    assert row["saga_type"] == "tests.order"
    assert row["correlation_key"] == "o-1"
    assert row["state_type"] == "tests.testapp.flows.OrderState"
    assert (row["step_index"], row["is_complete"], row["version"]) == (2, False, 2)
    assert row["flow_version"] == 1
    assert parse_datetime(row["created_at"]) == T0
    assert parse_datetime(row["updated_at"]) == T0 + timedelta(hours=1)
    assert row["completed_at"] is None
    assert row["deadline"] is None


def test_a_completed_row_says_when_it_completed(reader: APIClient) -> None:
    publish_at(T0, OrderPlaced("o-1"))
    publish_at(T0 + timedelta(minutes=5), OrderCanceled("o-1"))

    [row] = reader.get(LIST).json()["results"]

    assert row["is_complete"] is True
    assert parse_datetime(row["completed_at"]) == T0 + timedelta(minutes=5)


@pytest.mark.usefixtures("three_sagas")
def test_list_orders_by_last_transition_first(reader: APIClient) -> None:
    assert keys_of(reader.get(LIST)) == ["o-2", "o-1", "q-1"]


@pytest.mark.usefixtures("three_sagas")
def test_list_can_be_ordered_by_creation(reader: APIClient) -> None:
    assert keys_of(reader.get(LIST, {"ordering": "created_at"})) == ["o-1", "q-1", "o-2"]


# --- the list: filters ------------------------------------------------------------------

ISO = datetime.isoformat


@pytest.mark.usefixtures("three_sagas")
@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"saga_type": "tests.order"}, ["o-2", "o-1"]),
        ({"saga_type": "tests.ord"}, []),
        ({"saga_type_prefix": "tests.q"}, ["q-1"]),
        ({"saga_type_prefix": "quote"}, []),
        ({"correlation_key": "o-1"}, ["o-1"]),
        ({"state_type": "tests.testapp.timer_flows.QuoteState"}, ["q-1"]),
        ({"is_complete": "true"}, ["o-2"]),
        ({"is_complete": "false"}, ["o-1", "q-1"]),
        ({"created_after": ISO(T0 + timedelta(hours=1))}, ["o-2", "q-1"]),
        ({"created_before": ISO(T0 + timedelta(hours=1))}, ["o-1"]),
        ({"updated_after": ISO(T0 + timedelta(hours=3))}, ["o-2", "o-1"]),
        ({"updated_before": ISO(T0 + timedelta(hours=3))}, ["q-1"]),
        ({"updated_before": "2026-03-02T11:00:00Z"}, ["q-1"]),
        ({"min_step_index": "2"}, ["o-2", "o-1"]),
        ({"saga_type": "tests.order", "is_complete": "false"}, ["o-1"]),
    ],
    ids=lambda value: (
        "&".join(f"{k}={v}" for k, v in value.items()) if isinstance(value, dict) else None
    ),
)
def test_list_filter(reader: APIClient, params: dict[str, str], expected: list[str]) -> None:
    assert keys_of(reader.get(LIST, params)) == expected


@pytest.mark.usefixtures("three_sagas")
def test_is_complete_filter_accepts_1_and_0_like_other_drf_apis(reader: APIClient) -> None:
    assert keys_of(reader.get(LIST, {"is_complete": "0"})) == ["o-1", "q-1"]


def test_the_list_shows_and_filters_by_the_flow_version_each_instance_runs_on(
    reader: APIClient,
) -> None:
    with running_release(ParcelFlowV1):
        publish_at(T0, ParcelOrdered("p-1"))
    publish_at(T0 + timedelta(hours=1), ParcelOrdered("p-2"))

    rows = reader.get(LIST, {"saga_type": "tests.parcel"}).json()["results"]

    assert {row["correlation_key"]: row["flow_version"] for row in rows} == {"p-1": 1, "p-2": 2}
    assert keys_of(reader.get(LIST, {"flow_version": "2"})) == ["p-2"]
    assert keys_of(reader.get(LIST, {"flow_version": "1", "saga_type": "tests.parcel"})) == ["p-1"]
    assert keys_of(reader.get(LIST, {"flow_version": "3"})) == []


@pytest.mark.parametrize(
    ("param", "value"),
    [
        *(("flow_version", value) for value in ["two", "1.5", "-1", str(2**63)]),
        *(
            ("min_step_index", value)
            for value in ["99999999999999999999", str(2**31), "-1", "1e3", "two"]
        ),
    ],
)
def test_an_integer_filter_no_stored_value_can_match_is_a_400_naming_it(
    reader: APIClient, param: str, value: str
) -> None:
    response = reader.get(LIST, {param: value})

    assert response.status_code == 400
    assert param in response.json()


@pytest.mark.parametrize("param", ["created_after", "updated_before"])
def test_an_unparsable_time_filter_is_a_400_naming_the_parameter(
    reader: APIClient, param: str
) -> None:
    response = reader.get(LIST, {param: "an hour ago"})

    assert response.status_code == 400
    assert param in response.json()


def test_the_stall_query_finds_exactly_the_stuck_instance(reader: APIClient) -> None:
    now = T0 + timedelta(hours=5)
    publish_at(now - timedelta(hours=2), OrderPlaced("stuck"))
    publish_at(now - timedelta(hours=3), OrderPlaced("done-long-ago"))
    publish_at(now - timedelta(hours=2, minutes=30), OrderCanceled("done-long-ago"))
    publish_at(now - timedelta(hours=4), OrderPlaced("moving"))
    publish_at(now - timedelta(minutes=10), StockReserved("moving"))

    with freeze_time(now):
        response = reader.get(
            LIST, {"is_complete": "false", "updated_before": ISO(now - timedelta(hours=1))}
        )

    assert keys_of(response) == ["stuck"]


@pytest.mark.usefixtures("three_sagas")
def test_list_is_paginated_with_count_and_next(reader: APIClient) -> None:
    first = reader.get(LIST, {"page_size": 2}).json()
    second = reader.get(first["next"]).json()

    assert first["count"] == 3
    assert [row["correlation_key"] for row in first["results"]] == ["o-2", "o-1"]
    assert first["next"] is not None
    assert [row["correlation_key"] for row in second["results"]] == ["q-1"]
    assert second["next"] is None


# --- the detail -------------------------------------------------------------------------


def test_detail_adds_the_state_as_plain_json(reader: APIClient) -> None:
    publish_at(T0, OrderPlaced("o-1", Decimal("250.00")))
    saga = instance(OrderFlow, "o-1")

    body = reader.get(detail(saga.pk)).json()

    assert set(body) == {
        *INSTANCE_FIELDS,
        "state",
        "timeouts",
        "timeouts_total",
        "delayed_messages",
        "delayed_messages_total",
        "kept_events",
        "kept_events_total",
    }
    assert body["id"] == str(saga.pk)
    assert body["state"]["total"] == "250.00"
    assert body["state"]["reserved"] is False
    assert body["state"]["log"] == ["placed"]


def test_detail_lists_the_delayed_messages_waiting_for_their_delivery_time(
    reader: APIClient,
) -> None:
    publish_at(T0, InvoiceIssued("inv-1"))
    saga = instance(InvoiceFlow, "inv-1")
    row = SagaOutboxMessage.objects.get(saga=saga)

    with freeze_time(T0 + REMINDER_DELAY - timedelta(seconds=1)):
        waiting = reader.get(detail(saga.pk)).json()["delayed_messages"]
    with freeze_time(T0 + REMINDER_DELAY):
        due = reader.get(detail(saga.pk)).json()["delayed_messages"]

    assert [(m["id"], m["event_type"]) for m in waiting] == [(str(row.pk), row.event_type)]
    assert parse_datetime(waiting[0]["deliver_at"]) == T0 + REMINDER_DELAY
    assert parse_datetime(waiting[0]["created_at"]) == T0
    assert "payload" not in waiting[0]
    assert due == []  # its time has come: no longer waiting


def test_detail_state_carries_uuids_and_datetimes_as_strings(reader: APIClient) -> None:
    publish_at(T0, ProbeStarted("p-1"))
    saga = SagaInstance.objects.get(correlation_key="p-1")

    state = reader.get(detail(saga.pk)).json()["state"]

    assert state["saga_id"] == str(saga.pk)
    assert uuid.UUID(state["message_id"])
    assert parse_datetime(state["now"]) == T0


def test_detail_lists_the_instances_timers_by_field_name(reader: APIClient) -> None:
    publish_at(T0, QuoteSent("q-1"))
    publish_at(T0, QuoteSent("q-2"))
    saga = instance(QuoteFlow, "q-1")

    timers = reader.get(detail(saga.pk)).json()["timeouts"]

    by_name = {row["name"]: row for row in timers}
    assert set(by_name) == {"followup", "callback"}
    followup = by_name["followup"]
    assert set(followup) == set(TIMER_FIELDS)
    assert parse_datetime(followup["due_at"]) == T0 + timedelta(days=2)
    assert parse_datetime(by_name["callback"]["due_at"]) == T0 + timedelta(days=3)
    assert followup["event_type"] == "tests.quote.follow-up-due"
    assert followup["payload"] == {"quote_id": "q-1"}
    assert (followup["outcome"], followup["dispatched_at"]) == (None, None)


def test_detail_keeps_timers_that_left_the_pending_set(reader: APIClient) -> None:
    publish_at(T0, QuoteSent("q-1"))
    publish_at(T0 + timedelta(hours=1), QuoteAccepted("q-1"))

    timers = reader.get(detail(instance(QuoteFlow, "q-1").pk)).json()["timeouts"]

    assert sorted(row["name"] for row in timers) == ["callback", "followup"]
    assert {row["outcome"] for row in timers} == {"canceled"}


def test_detail_of_an_unknown_id_is_404(reader: APIClient) -> None:
    assert reader.get(detail(uuid.uuid4())).status_code == 404
    assert reader.get(detail("not-a-uuid")).status_code == 404


def test_without_a_read_content_permission_the_detail_route_is_unmapped(
    reader: APIClient,
) -> None:
    publish(OrderPlaced("o-1"))
    saga = instance(OrderFlow, "o-1")

    with override_settings(BSFT_SAGA={"API": {"READ_CONTENT_PERMISSION": None}}):
        assert reader.get(detail(saga.pk)).status_code == 404


def test_without_a_read_content_permission_the_detail_route_serves_nothing(
    reader: APIClient,
) -> None:
    # Holds today (403) and after the fix (404): no content, no audit record.
    publish(OrderPlaced("o-1"))
    saga = instance(OrderFlow, "o-1")

    with override_settings(BSFT_SAGA={"API": {"READ_CONTENT_PERMISSION": None}}):
        response = reader.get(detail(saga.pk))
        listing = reader.get(LIST)

    assert response.status_code in (403, 404)
    assert "state" not in response.json()
    assert not SagaAuditRecord.objects.exists()
    assert keys_of(listing) == ["o-1"]


# --- the audit of reads -----------------------------------------------------------------


def test_a_hit_writes_exactly_one_audit_record(operator: User) -> None:
    publish(OrderPlaced("o-1"))
    saga = instance(OrderFlow, "o-1")

    with freeze_time(T0):
        response = client_for(operator).get(detail(saga.pk))

    assert response.status_code == 200
    [record] = SagaAuditRecord.objects.all()
    assert record.action == "saga.instance.read-content" == READ_CONTENT
    assert record.user == operator
    assert record.username == "operator"
    assert record.saga_type == "tests.order"
    assert record.correlation_key == "o-1"
    assert record.instance_id == saga.pk
    assert record.recorded_at == T0


def test_each_hit_is_audited_again(reader: APIClient) -> None:
    publish(OrderPlaced("o-1"))
    url = detail(instance(OrderFlow, "o-1").pk)

    reader.get(url)
    reader.get(url)

    assert SagaAuditRecord.objects.count() == 2


def test_a_miss_writes_no_audit_record(reader: APIClient) -> None:
    publish(OrderPlaced("o-1"))

    assert reader.get(detail(uuid.uuid4())).status_code == 404
    assert reader.get(detail("not-a-uuid")).status_code == 404
    assert not SagaAuditRecord.objects.exists()


def test_a_refused_read_writes_no_audit_record() -> None:
    publish(OrderPlaced("o-1"))
    url = detail(instance(OrderFlow, "o-1").pk)

    assert client_for(make_user(VIEW)).get(url).status_code == 403
    assert client_for(None).get(url).status_code in (401, 403)
    assert not SagaAuditRecord.objects.exists()


def test_listing_writes_no_audit_record(reader: APIClient) -> None:
    publish(OrderPlaced("o-1"))

    assert reader.get(LIST).status_code == 200
    assert not SagaAuditRecord.objects.exists()


def test_the_audit_record_carries_the_requests_correlation_id(reader: APIClient) -> None:
    publish(OrderPlaced("o-1"))

    reader.get(detail(instance(OrderFlow, "o-1").pk), HTTP_X_CORRELATION_ID="ticket-4711")

    assert SagaAuditRecord.objects.get().correlation_id == "ticket-4711"


RECORDED: list[dict[str, Any]] = []


class ListRecorder:
    """A custom recorder: appends every call's keyword arguments to ``RECORDED``."""

    def record(
        self,
        *,
        action: str,
        user: Any,
        saga_type: str,
        correlation_key: str | None,
        instance_id: Any,
    ) -> None:
        RECORDED.append(
            {
                "action": action,
                "user": user,
                "saga_type": saga_type,
                "correlation_key": correlation_key,
                "instance_id": instance_id,
            }
        )


class FailingRecorder:
    def record(self, **kwargs: Any) -> None:
        raise RuntimeError("audit store is down")


@pytest.fixture
def recorded() -> Iterator[list[dict[str, Any]]]:
    RECORDED.clear()
    yield RECORDED
    RECORDED.clear()


def _api(**options: Any) -> dict[str, Any]:
    return {"API": {"READ_CONTENT_PERMISSION": READ, **options}}


def test_a_custom_recorder_receives_each_read(
    operator: User, recorded: list[dict[str, Any]]
) -> None:
    publish(OrderPlaced("o-1"))
    saga = instance(OrderFlow, "o-1")

    with override_settings(BSFT_SAGA=_api(AUDIT_RECORDER="tests.api.test_api.ListRecorder")):
        response = client_for(operator).get(detail(saga.pk))

    assert response.status_code == 200
    assert recorded == [
        {
            "action": "saga.instance.read-content",
            "user": operator,
            "saga_type": "tests.order",
            "correlation_key": "o-1",
            "instance_id": saga.pk,
        }
    ]
    assert not SagaAuditRecord.objects.exists()


def test_a_custom_recorder_is_not_called_on_a_miss(
    reader: APIClient, recorded: list[dict[str, Any]]
) -> None:
    with override_settings(BSFT_SAGA=_api(AUDIT_RECORDER="tests.api.test_api.ListRecorder")):
        assert reader.get(detail(uuid.uuid4())).status_code == 404

    assert recorded == []


def test_a_single_instance_flow_is_audited_with_no_correlation_key(
    reader: APIClient, recorded: list[dict[str, Any]]
) -> None:
    publish(Ping())
    saga = SagaInstance.objects.get(saga_type="tests.single")

    with override_settings(BSFT_SAGA=_api(AUDIT_RECORDER="tests.api.test_api.ListRecorder")):
        reader.get(detail(saga.pk))

    assert recorded[0]["correlation_key"] is None


def test_content_is_not_served_when_the_recorder_fails(reader: APIClient) -> None:
    publish(OrderPlaced("o-1"))
    reader.raise_request_exception = False

    with override_settings(BSFT_SAGA=_api(AUDIT_RECORDER="tests.api.test_api.FailingRecorder")):
        response = reader.get(detail(instance(OrderFlow, "o-1").pk))

    assert response.status_code == 500
    assert b"state" not in response.content


# --- the schema -------------------------------------------------------------------------


def test_schema_is_served_as_openapi_yaml_under_the_same_prefix(reader: APIClient) -> None:
    response = reader.get(SCHEMA)

    assert response.status_code == 200
    document = yaml.safe_load(response.content)
    assert document["openapi"].startswith("3.")
    assert {"/instances/", "/instances/{id}/"} <= set(document["paths"])
    assert document["servers"] == [{"url": "/api/sagas"}]


def test_schema_is_served_as_json_on_request(reader: APIClient) -> None:
    as_param = reader.get(SCHEMA, {"format": "json"})
    as_accept = reader.get(SCHEMA, HTTP_ACCEPT="application/vnd.oai.openapi+json")

    for response in (as_param, as_accept):
        document = json.loads(response.content)
        assert {"/instances/", "/instances/{id}/"} <= set(document["paths"])
        assert document["servers"] == [{"url": "/api/sagas"}]


def test_schema_documents_the_list_filters(reader: APIClient) -> None:
    document = reader.get(SCHEMA, {"format": "json"}).json()

    names = {p["name"] for p in document["paths"]["/instances/"]["get"]["parameters"]}
    assert {
        "saga_type",
        "saga_type_prefix",
        "correlation_key",
        "state_type",
        "is_complete",
        "created_after",
        "created_before",
        "updated_after",
        "updated_before",
        "min_step_index",
        "flow_version",
        "page",
    } <= names


# --- the examples in docs/http.md -------------------------------------------------------


def _docs_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOCS.read_text(), re.S)


def _docs_example(marker: str, language: str = "python") -> str:
    [block] = [block for block in _docs_blocks(language) if marker in block]
    return block


def _exec_as_module(monkeypatch: pytest.MonkeyPatch, name: str, source: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, f"docs/http.md:{name}", "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, name, module)
    return module


def test_docs_settings_example_passes_the_checks() -> None:
    from bsft_saga.checks import check_audit_recorder, check_settings

    namespace: dict[str, Any] = {}
    exec(_docs_example("INSTALLED_APPS = ["), namespace)

    assert namespace["BSFT_SAGA"]["API"]["READ_CONTENT_PERMISSION"] == READ
    with override_settings(BSFT_SAGA=namespace["BSFT_SAGA"]):
        assert check_settings() == []
        assert check_audit_recorder() == []


def test_docs_urls_example_mounts_the_surface(
    monkeypatch: pytest.MonkeyPatch, reader: APIClient
) -> None:
    _exec_as_module(monkeypatch, "docs_http_urls", _docs_example("urlpatterns = ["))
    publish(OrderPlaced("o-1"))

    with override_settings(ROOT_URLCONF="docs_http_urls"):
        assert reverse("bsft_saga:instance-list") == LIST
        assert reverse("bsft_saga:schema") == SCHEMA
        saga = instance(OrderFlow, "o-1")
        assert reverse("bsft_saga:instance-detail", kwargs={"pk": saga.pk}) == detail(saga.pk)
        assert keys_of(reader.get(LIST)) == ["o-1"]


def test_docs_group_example_grants_both_routes() -> None:
    exec(_docs_example("Group.objects.get_or_create"), {})
    publish(OrderPlaced("o-1"))
    user = User.objects.create_user("grace")
    user.groups.add(Group.objects.get(name="saga operators"))
    client = client_for(user)

    assert client.get(LIST).status_code == 200
    assert client.get(detail(instance(OrderFlow, "o-1").pk)).status_code == 200


@pytest.mark.parametrize("block", ["list", "timeout", "delayed message"])
def test_docs_response_examples_show_the_real_field_names(reader: APIClient, block: str) -> None:
    publish(QuoteSent("q-1"))
    publish(InvoiceIssued("inv-1"))
    saga = instance(QuoteFlow, "q-1")
    page = reader.get(LIST).json()
    timers = reader.get(detail(saga.pk)).json()["timeouts"]
    delayed = reader.get(detail(instance(InvoiceFlow, "inv-1").pk)).json()["delayed_messages"]

    if block == "list":
        documented = json.loads(_docs_example('"saga_type": "orders.fulfilment"', "json"))
        assert set(documented) == set(page)
        assert set(documented["results"][0]) == set(page["results"][0])
    elif block == "timeout":
        documented = json.loads(_docs_example('"name": "followup"', "json"))
        assert set(documented) == set(timers[0])
    else:
        documented = json.loads(_docs_example('"deliver_at": "2026', "json"))
        assert set(documented) == set(delayed[0])


def test_docs_stall_query_lists_only_the_stuck_instance(reader: APIClient) -> None:
    [request_line] = _docs_example("GET ", "http").strip().splitlines()
    url = request_line.removeprefix("GET ")
    now = datetime(2026, 3, 27, 10, 0, tzinfo=UTC)
    publish_at(now - timedelta(hours=2), OrderPlaced("stuck"))
    publish_at(now - timedelta(minutes=20), OrderPlaced("fresh"))

    with freeze_time(now):
        assert keys_of(reader.get(url)) == ["stuck"]


def test_docs_stalled_instances_url_helper(reader: APIClient) -> None:
    namespace: dict[str, Any] = {}
    exec(_docs_example("def stalled_instances_url"), namespace)
    now = T0 + timedelta(days=1)
    publish_at(now - timedelta(hours=2), OrderPlaced("stuck"))
    publish_at(now - timedelta(minutes=20), OrderPlaced("fresh"))

    with freeze_time(now):
        assert keys_of(reader.get(namespace["stalled_instances_url"]())) == ["stuck"]
        url = namespace["stalled_instances_url"](idle=timedelta(minutes=10))
        assert keys_of(reader.get(url)) == ["fresh", "stuck"]


def test_docs_who_read_example(operator: User) -> None:
    namespace: dict[str, Any] = {}
    exec(_docs_example("def who_read"), namespace)
    publish(OrderPlaced("o-1"))
    saga = instance(OrderFlow, "o-1")

    with freeze_time(T0):
        client_for(operator).get(detail(saga.pk))

    assert namespace["who_read"](saga.pk) == [("operator", T0)]


def test_docs_logging_recorder_example(
    monkeypatch: pytest.MonkeyPatch, reader: APIClient, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "myproject", types.ModuleType("myproject"))
    _exec_as_module(monkeypatch, "myproject.audit", _docs_example("class LoggingAuditRecorder"))
    namespace: dict[str, Any] = {}
    exec(_docs_example('"myproject.audit.LoggingAuditRecorder"'), namespace)
    publish(OrderPlaced("o-1"))
    saga = instance(OrderFlow, "o-1")

    with (
        override_settings(BSFT_SAGA=namespace["BSFT_SAGA"]),
        caplog.at_level(logging.INFO, logger="myproject.audit"),
    ):
        from bsft_saga.checks import check_audit_recorder

        assert check_audit_recorder() == []
        assert reader.get(detail(saga.pk)).status_code == 200

    assert [r.getMessage() for r in caplog.records if r.name == "myproject.audit"] == [
        f"saga.instance.read-content by operator: tests.order[o-1] {saga.pk}"
    ]
    assert not SagaAuditRecord.objects.exists()
