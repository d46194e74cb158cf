"""No query value answers 500, and no content is shown without an audit record.

A table of hostile values — dates beyond year 9999 in UTC or before year 1, NUL bytes
(PostgreSQL refuses them in text, SQLite does not), invalid UTF-8, huge numbers, long and
odd strings — is sent in every query parameter of the HTTP routes and the admin
changelists, as a superuser (who may read content). Each response must be one the user can
act on: the API answers 200, 400 or (paging) 404; the admin 200, 400, or its redirect to
``?e=1``. Any page that shows ``SECRET`` must have written exactly one audit record.

Runs inside the test's transaction on purpose: on PostgreSQL a statement that failed would
abort it, so the walk also proves no refused value reached the database unguarded.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

import pytest
from django.test import Client

from bsft_saga.api.filters import SagaInstanceFilter
from bsft_saga.models import SagaAuditRecord
from tests.admin_support import SECRET, ContentRows, admin_url, make_content_rows, staff_client

pytestmark = pytest.mark.django_db

HOSTILE = [
    "9999-12-31T23:59:59-23:59",  # year 10000 in UTC
    "0001-01-01T00:00:00+23:59",  # year 0 in UTC
    "9999-12-31",
    "0001-01-01",
    "2026-13-45T25:61:00Z",
    "0",
    "-1",
    "99999999999999999999",
    "-99999999999999999999",
    "1e999",
    "NaN",
    "\x00",
    "a\x00b",
    "x" * 5000,
    "' OR '1'='1",
    "%_\\",
]
# Sent as they are: bytes that are not UTF-8 text (a lone surrogate's encoding, 0xFF).
RAW_HOSTILE = ["%ED%A0%80", "%FF", "%00"]

# Every filter the list declares (a new one is walked too), and the paging and ordering.
API_FILTERS = [*SagaInstanceFilter.base_filters, "ordering", "page", "page_size"]

ADMIN_PARAMS = {
    "sagainstance": [
        "saga_type",
        "is_complete__exact",
        "stalled",
        "updated_at__year",
        "updated_at__gte",
        "created_at__lt",
        "step_index",
        "q",
        "o",
        "p",
    ],
    "sagatimeout": [
        "outcome",
        "event_type",
        "calendar_key",
        "scope__exact",
        "saga__saga_type",
        "saga__id__exact",
        "due_at__year",
        "due_at__month",
        "due_at__gte",
        "attempts",
        "q",
        "p",
    ],
    "sagaoutboxmessage": ["status", "event_type", "created_at__year", "id", "attempts", "q"],
    "sagaauditrecord": ["action", "saga_type", "recorded_at__day", "instance_id", "q"],
}

# The date drill-down with bounds Django computes in Python (year 9999 has no end).
DRILL_DOWNS = [
    ("9999", "12", "31"),
    ("9999", "12", None),
    ("9999", None, None),
    ("1", "1", "1"),
    ("0", None, None),
    ("99999999999999999999", None, None),
    ("2026", "13", None),
    ("2026", "2", "30"),
]
HIERARCHIES = {
    "sagainstance": "updated_at",
    "sagatimeout": "due_at",
    "sagaoutboxmessage": "created_at",
    "sagaauditrecord": "recorded_at",
}


def query_strings(params: Iterable[str]) -> list[str]:
    return [
        *(f"{param}={quote(value)}" for param in params for value in HOSTILE),
        *(f"{param}={raw}" for param in params for raw in RAW_HOSTILE),
    ]


def walk(client: Client, url: str, queries: Iterable[str], allowed: set[int]) -> list[str]:
    """Request ``url`` with each query; describe every response that breaks the rules."""
    problems = []
    for query in queries:
        audited_before = SagaAuditRecord.objects.count()
        response = client.get(f"{url}?{query}")
        audited = SagaAuditRecord.objects.count() - audited_before
        shown = SECRET in response.content.decode(errors="replace")
        where = f"{url}?{query[:60]} -> {response.status_code}"
        if response.status_code not in allowed:
            problems.append(where)
        elif response.status_code == 302 and not response["Location"].endswith("?e=1"):
            problems.append(f"{where} redirected to {response['Location']}")
        elif audited != (1 if shown else 0):
            problems.append(f"{where} showed content={shown} with {audited} audit records")
    return problems


@pytest.fixture
def rows() -> ContentRows:
    return make_content_rows()


@pytest.fixture
def root() -> Client:
    client = staff_client("root", superuser=True)
    client.raise_request_exception = False  # count a 500 instead of stopping at the first
    return client


API_ALLOWED = {200, 400, 404}


def test_the_instance_list_answers_every_hostile_filter(rows: ContentRows, root: Client) -> None:
    assert walk(root, "/api/sagas/instances/", query_strings(API_FILTERS), API_ALLOWED) == []


def test_the_instance_detail_answers_every_hostile_query(rows: ContentRows, root: Client) -> None:
    url = f"/api/sagas/instances/{rows.saga.pk}/"
    assert walk(root, url, query_strings(API_FILTERS), API_ALLOWED) == []


def test_the_timer_route_answers_every_hostile_query(rows: ContentRows, root: Client) -> None:
    url = f"/api/sagas/instances/{rows.saga.pk}/timeouts/"
    assert walk(root, url, query_strings(API_FILTERS), API_ALLOWED) == []


@pytest.mark.parametrize("model", list(ADMIN_PARAMS))
def test_a_changelist_answers_every_hostile_filter(
    rows: ContentRows, root: Client, model: str
) -> None:
    url = admin_url(model, "changelist")
    assert walk(root, url, query_strings(ADMIN_PARAMS[model]), {200, 302, 400}) == []


@pytest.mark.parametrize("model", list(HIERARCHIES))
def test_a_changelist_answers_every_hostile_date_drill_down(
    rows: ContentRows, root: Client, model: str
) -> None:
    field = HIERARCHIES[model]
    queries = [
        "&".join(
            f"{field}__{part}={value}"
            for part, value in zip(("year", "month", "day"), drill, strict=True)
            if value is not None
        )
        for drill in DRILL_DOWNS
    ]
    assert walk(root, admin_url(model, "changelist"), queries, {200, 302, 400}) == []


@pytest.mark.parametrize("model", ["sagatimeout", "sagaoutboxmessage", "sagainstance"])
def test_change_pages_answer_hostile_ids_without_a_500_or_an_audit(
    rows: ContentRows, root: Client, model: str
) -> None:
    for object_id in ["99999999999999999999", "-1", "%00", "not-a-uuid", "1e999", "%ED%A0%80"]:
        response = root.get(f"{admin_url(model, 'changelist')}{object_id}/change/")
        assert response.status_code in {200, 302, 404}, (object_id, response.status_code)
    assert not SagaAuditRecord.objects.exists()


def test_the_content_routes_answer_hostile_ids_with_404_and_no_audit(root: Any) -> None:
    for object_id in ["99999999999999999999", "%00", "not-a-uuid", "%ED%A0%80"]:
        assert root.get(f"/api/sagas/instances/{object_id}/").status_code == 404
        assert root.get(f"/api/sagas/instances/{object_id}/timeouts/").status_code == 404
    assert not SagaAuditRecord.objects.exists()


def test_a_valid_filter_still_filters_after_the_guards(rows: ContentRows, root: Client) -> None:
    listed = root.get("/api/sagas/instances/", {"created_after": "2000-01-01T00:00:00Z"})
    drilled = root.get(admin_url("sagainstance", "changelist"), {"updated_at__year": "2000"})

    assert listed.json()["count"] == 1
    assert drilled.status_code == 200
    assert list(drilled.context["cl"].result_list) == []
