"""An instance's journal over HTTP: ``GET instances/<id>/history/``, paged, newest first.

The journal holds metadata only, so the route needs the list's permission and no content
permission, and it is not audited.
"""

from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings
from django.urls import reverse
from freezegun import freeze_time
from rest_framework.test import APIClient

from bsft_saga import publish
from bsft_saga.api.serializers import JOURNAL_FIELDS
from bsft_saga.models import (
    JournalKind,
    SagaAuditRecord,
    SagaInstance,
    SagaJournalEntry,
)
from bsft_saga.timeouts import drain_due
from tests.api.test_api_timeouts import READ, VIEW, client_with
from tests.db.test_datetimes import store_unreadable
from tests.support.journal_rows import (
    advanced_by_timer,
    entry,
    shown_timer_canceled_by,
    timer_canceled_by,
)
from tests.testapp.ops_events import QuoteSent
from tests.testapp.ops_flows import QuoteFollowUpFlow, make_saga

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
DOCS = Path(__file__).resolve().parents[2] / "docs" / "http.md"


def history_url(saga: SagaInstance | str) -> str:
    pk = saga if isinstance(saga, str) else saga.pk
    return reverse("bsft_saga:instance-history", kwargs={"pk": pk})


def kinds(response: Any) -> list[str]:
    assert response.status_code == 200, response.content
    return [row["kind"] for row in response.json()["results"]]


@pytest.fixture
def viewer() -> APIClient:
    """Allowed to see sagas, not to read their content."""
    return client_with(VIEW)


@pytest.fixture
def timer_viewer() -> APIClient:
    """Allowed to see sagas and their timers (``view_sagatimeout``), not their content."""
    return client_with(VIEW, "view_sagatimeout")


@pytest.fixture
def journaled() -> SagaInstance:
    """Started at T0, advanced by its timer at T0+2d, a timer canceled by alice at T0+3d."""
    saga = make_saga("journaled", now=T0)
    entry(saga, JournalKind.STARTED, T0, step_after=1)
    advanced_by_timer(saga, T0 + timedelta(days=2))
    timer_canceled_by(saga, T0 + timedelta(days=3), "alice")
    return saga


# --- what it shows ----------------------------------------------------------------------


def test_the_history_lists_the_journal_newest_first(
    viewer: APIClient, journaled: SagaInstance
) -> None:
    assert kinds(viewer.get(history_url(journaled))) == ["timer_canceled", "advanced", "started"]


def test_entries_of_the_same_instant_come_newest_written_first(viewer: APIClient) -> None:
    saga = make_saga("same-instant", now=T0)
    first = entry(saga, JournalKind.ADVANCED, T0, step_before=1, step_after=2)
    second = entry(saga, JournalKind.COMPLETED, T0, step_before=2, step_after=3)

    results = viewer.get(history_url(saga)).json()["results"]

    assert [row["message_id"] for row in results] == [
        str(second.message_id),
        str(first.message_id),
    ]


def test_an_entry_carries_its_fields_by_name_and_no_state_or_payload(
    timer_viewer: APIClient, journaled: SagaInstance
) -> None:
    [canceled, advanced, started] = timer_viewer.get(history_url(journaled)).json()["results"]

    assert list(canceled) == JOURNAL_FIELDS
    assert canceled == shown_timer_canceled_by("alice", "2026-03-05T08:00:00Z")
    assert (advanced["via"], advanced["timer_name"], advanced["step_before"]) == (
        "timer",
        "remind",
        1,
    )
    assert (started["via"], started["step_before"], started["step_after"]) == ("publish", None, 1)
    assert not {"state", "payload"} & {key for row in (canceled, advanced) for key in row}


def test_timer_names_are_null_to_a_user_who_may_not_see_timers(
    viewer: APIClient, journaled: SagaInstance
) -> None:
    [canceled, advanced, started] = viewer.get(history_url(journaled)).json()["results"]

    assert [row["timer_name"] for row in (canceled, advanced, started)] == [None, None, None]
    # The rest of each entry is the same: the step, the time, who acted.
    assert canceled == {
        **shown_timer_canceled_by("alice", "2026-03-05T08:00:00Z"),
        "timer_name": None,
    }
    assert (advanced["via"], advanced["step_before"], advanced["step_after"]) == ("timer", 1, 2)


def test_timer_names_are_shown_to_a_user_who_may_see_timers(
    timer_viewer: APIClient, journaled: SagaInstance
) -> None:
    results = timer_viewer.get(history_url(journaled)).json()["results"]

    # "" for an entry that names no timer, as stored.
    assert [row["timer_name"] for row in results] == ["escalate", "remind", ""]


def test_the_history_shows_only_that_instances_entries(
    viewer: APIClient, journaled: SagaInstance
) -> None:
    other = make_saga("other", now=T0)
    entry(other, JournalKind.STARTED, T0 + timedelta(days=9), step_after=1)

    assert viewer.get(history_url(journaled)).json()["count"] == 3
    assert kinds(viewer.get(history_url(other))) == ["started"]


def test_an_instance_with_no_entries_has_an_empty_history(viewer: APIClient) -> None:
    body = viewer.get(history_url(make_saga("before-the-journal"))).json()

    assert (body["count"], body["results"]) == (0, [])


def test_an_entry_whose_time_cannot_be_read_is_served_with_null_and_named(
    viewer: APIClient, journaled: SagaInstance
) -> None:
    started = journaled.journal.get(kind=JournalKind.STARTED)
    store_unreadable(SagaJournalEntry, started.pk, "at")

    results = viewer.get(history_url(journaled)).json()["results"]

    unreadable = [row for row in results if "unreadable_fields" in row]
    assert [(row["kind"], row["at"], row["unreadable_fields"]) for row in unreadable] == [
        ("started", None, ["at"])
    ]
    assert len(results) == 3


def test_a_published_start_and_a_fired_timer_show_as_started_then_advanced(
    timer_viewer: APIClient,
) -> None:
    with freeze_time(T0):
        publish(QuoteSent("q-1"))
    with freeze_time(T0 + timedelta(days=2, seconds=1)):
        assert drain_due().fired == 1
    saga = SagaInstance.objects.get(saga_type=QuoteFollowUpFlow.saga_type, correlation_key="q-1")

    results = timer_viewer.get(history_url(saga)).json()["results"]

    assert [
        (row["at"], row["kind"], row["via"], row["timer_name"], row["step_after"])
        for row in results
    ] == [
        ("2026-03-04T08:00:01Z", "advanced", "timer", "followup", 2),
        ("2026-03-02T08:00:00Z", "started", "publish", "", 1),
    ]


# --- pages ------------------------------------------------------------------------------


def test_the_history_is_paged_newest_first_across_pages(viewer: APIClient) -> None:
    saga = make_saga("long", now=T0)
    for number in range(7):
        entry(saga, JournalKind.HANDLED, T0 + timedelta(hours=number), step_before=1, step_after=1)

    first = viewer.get(history_url(saga), {"page_size": 3}).json()
    second = viewer.get(first["next"]).json()
    third = viewer.get(second["next"]).json()

    assert first["count"] == 7
    ats = [row["at"] for page in (first, second, third) for row in page["results"]]
    assert ats == [f"2026-03-02T{8 + number:02d}:00:00Z" for number in reversed(range(7))]
    assert (third["next"], len(third["results"])) == (None, 1)


def test_pages_hold_50_entries_unless_asked(viewer: APIClient) -> None:
    saga = make_saga("fifty", now=T0)
    for number in range(51):
        entry(saga, JournalKind.HANDLED, T0 + timedelta(minutes=number))

    body = viewer.get(history_url(saga)).json()

    assert (body["count"], len(body["results"])) == (51, 50)
    assert body["next"] is not None


def test_a_page_past_the_end_is_404(viewer: APIClient, journaled: SagaInstance) -> None:
    assert viewer.get(history_url(journaled), {"page": 9}).status_code == 404


# --- who may read it --------------------------------------------------------------------


@pytest.mark.parametrize("codenames", [(), (READ,)], ids=["nothing", "content-only"])
def test_the_history_needs_the_view_permission(
    journaled: SagaInstance, codenames: tuple[str, ...]
) -> None:
    assert client_with(*codenames).get(history_url(journaled)).status_code == 403


def test_the_history_is_refused_to_anonymous_requests(journaled: SagaInstance) -> None:
    assert APIClient().get(history_url(journaled)).status_code in (401, 403)


def test_a_viewer_without_the_content_permission_reads_the_history_unaudited(
    viewer: APIClient, journaled: SagaInstance
) -> None:
    assert viewer.get(history_url(journaled)).status_code == 200
    assert viewer.get(reverse("bsft_saga:instance-detail", args=[journaled.pk])).status_code == 403
    assert not SagaAuditRecord.objects.exists()


def test_the_history_is_served_when_no_content_permission_is_configured(
    viewer: APIClient, journaled: SagaInstance
) -> None:
    with override_settings(BSFT_SAGA={"API": {"READ_CONTENT_PERMISSION": None}}):
        response = viewer.get(history_url(journaled))

    assert kinds(response) == ["timer_canceled", "advanced", "started"]


def test_the_history_of_an_unknown_instance_is_404(viewer: APIClient) -> None:
    assert viewer.get(history_url(str(uuid.uuid4()))).status_code == 404
    assert viewer.get(history_url("not-a-uuid")).status_code == 404


# --- the schema and the docs --------------------------------------------------------------


def test_the_schema_documents_the_history_as_a_page_of_entries(viewer: APIClient) -> None:
    schema = viewer.get(reverse("bsft_saga:schema"), {"format": "json"}).json()

    operation = schema["paths"]["/instances/{id}/history/"]["get"]
    page = operation["responses"]["200"]["content"]["application/json"]["schema"]
    assert page == {"$ref": "#/components/schemas/PaginatedSagaJournalEntryList"}
    assert {p["name"] for p in operation["parameters"]} == {"id", "page", "page_size"}
    entry_schema = schema["components"]["schemas"]["SagaJournalEntry"]
    assert list(entry_schema["properties"]) == JOURNAL_FIELDS


def test_the_docs_example_response_shows_the_real_field_names(
    viewer: APIClient, journaled: SagaInstance
) -> None:
    [block] = [
        block
        for block in re.findall(r"```json\n(.*?)```", DOCS.read_text(), re.S)
        if '"kind": "' in block
    ]
    documented = json.loads(block)
    served = viewer.get(history_url(journaled)).json()

    assert set(documented) == set(served)
    assert [list(row) for row in documented["results"]] == [JOURNAL_FIELDS] * len(
        documented["results"]
    )
