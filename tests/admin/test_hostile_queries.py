"""No query value answers 500, and no content is shown without an audit record.

A table of hostile values — dates beyond year 9999 in UTC or before year 1, NUL bytes
(PostgreSQL refuses them in text, SQLite does not), invalid UTF-8, huge numbers, long and
odd strings — is sent in every query parameter of the HTTP routes and the admin
changelists, as a superuser (who may read content). Each response must be one the user can
act on: the API answers 200, 400 or (paging) 404; the admin 200, 400, or its redirect to
``?e=1``. Any page that shows ``SECRET`` must have written exactly one audit record.

Runs inside the test's transaction on purpose: on PostgreSQL a statement that failed would
abort it, so the walk also proves no refused value reached the database unguarded.

The changelists accept only the lookups their own pages produce (every link a list page
shows is followed and must answer 200); any other lookup, however harmless its value, is a
400. And the whole walk is repeated with a row whose dates cannot be read back (year 10000,
as PostgreSQL stored it before publish refused such dates).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

import pytest
from django.test import Client

from bsft_saga.api.filters import SagaInstanceFilter
from bsft_saga.models import SagaAuditRecord, SagaInstance, SagaTimeout
from tests.db.test_datetimes import store_unreadable
from tests.support.admin import (
    SECRET,
    VIEW_ALL,
    ContentRows,
    admin_url,
    make_content_rows,
    staff_client,
)

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


@pytest.fixture(params=["readable", "unreadable dates"])
def rows(request: pytest.FixtureRequest) -> ContentRows:
    content = make_content_rows()
    if request.param == "unreadable dates":
        store_unreadable(SagaTimeout, content.pending.pk, "due_at")
        store_unreadable(SagaInstance, content.saga.pk, "deadline")
    return content


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


# --- only the lookups a changelist produces ------------------------------------------------

#: Lookups no page of the admin writes: refused with 400 for every user, whatever the value
#: (``?saga_type__regex=(.*){9}X`` took 13 seconds on SQLite, in Python's backtracking re).
FOREIGN_LOOKUPS = {
    "sagainstance": [
        "saga_type__regex=x",
        "saga_type__iregex=x",
        "saga_type__startswith=tests",
        "correlation_key__contains=secret",
        "state_type__exact=x",
        "step_index__gt=0",
        "updated_at__week_day=2",
        "timeouts__name=dead",
        "no_such_field=1",
    ],
    "sagatimeout": [
        "name__regex=x",
        "event_type__icontains=ops",
        "saga__saga_type__regex=x",
        "saga__correlation_key=secret-1",
        "attempts__gte=0",
        "message_id=00000000-0000-0000-0000-000000000000",
    ],
    "sagaoutboxmessage": ["event_type__regex=x", "correlation_id__startswith=x", "saga__id=x"],
    "sagaauditrecord": ["username__regex=x", "action__in=a,b", "correlation_id=x"],
}


@pytest.mark.parametrize("who", ["superuser", "view-only"])
@pytest.mark.parametrize("model", list(FOREIGN_LOOKUPS))
def test_a_changelist_refuses_lookups_its_pages_do_not_produce(
    rows: ContentRows, model: str, who: str
) -> None:
    client = (
        staff_client("root", superuser=True) if who == "superuser" else staff_client("v", *VIEW_ALL)
    )
    url = admin_url(model, "changelist")

    answers = {query: client.get(f"{url}?{query}").status_code for query in FOREIGN_LOOKUPS[model]}

    assert answers == dict.fromkeys(FOREIGN_LOOKUPS[model], 400)


def _list_links(page: str) -> set[str]:
    """The query strings of the links a changelist shows: filters, drill-down, sorting."""
    return {html.unescape(href) for href in re.findall(r'href="(\?[^"]+)"', page)}


@pytest.mark.parametrize("model", list(ADMIN_PARAMS))
def test_every_link_a_changelist_shows_is_accepted(rows: ContentRows, model: str) -> None:
    client = staff_client("root", superuser=True)
    client.get(admin_url("sagainstance", "change", rows.saga.pk))  # an audit record to list
    url = admin_url(model, "changelist")
    links = _list_links(client.get(url).content.decode())
    drilled = set()
    for link in list(links):  # one level down: the drill-down's months, a filter's others
        if "__year=" in link:
            drilled |= _list_links(client.get(f"{url}{link}").content.decode())

    answers = {link: client.get(f"{url}{link}").status_code for link in links | drilled}

    assert len(answers) > 5
    assert {link: code for link, code in answers.items() if code != 200} == {}


def test_the_links_of_the_admin_pages_into_changelists_are_accepted() -> None:
    rows = make_content_rows()
    client = staff_client("root", superuser=True)
    pages = [
        client.get("/admin/bsft_saga/").content.decode(),
        client.get(admin_url("sagainstance", "change", rows.saga.pk)).content.decode(),
    ]
    links = {
        html.unescape(href)
        for page in pages
        for href in re.findall(r'href="(/admin/bsft_saga/[a-z]+/\?[^"]+)"', page)
    }

    answers = {link: client.get(link).status_code for link in links}

    assert len(answers) >= 5
    assert set(answers.values()) == {200}
