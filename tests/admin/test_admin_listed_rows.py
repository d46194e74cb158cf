"""The instance page lists at most 50 kept events and 50 delayed messages, says how many
there are in all and links to the lists that hold them all.

5,000 kept rows made the page 8.8 MB and 15 s; its size and its number of queries no longer
grow with them.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.utils.html import strip_tags
from freezegun import freeze_time

from bsft_saga.listing import ROWS_LISTED
from bsft_saga.models import SagaInstance, SagaKeptEvent, SagaOutboxMessage, SagaTimeout
from tests.api.test_api import RECORDED
from tests.support.admin import CONTENT, VIEW_ALL, admin_url, staff_client
from tests.support.listed_rows import KEPT_SECRET, delay_many, keep_many
from tests.testapp.ops_flows import make_saga

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
MANY_KEPT = 5_000
#: Everyone's view permissions, the kept events' too (the link's list needs it).
VIEWS = (*VIEW_ALL, "view_sagakeptevent")
RECORDER = {
    "API": {
        "READ_CONTENT_PERMISSION": f"bsft_saga.{CONTENT}",
        "AUDIT_RECORDER": "tests.api.test_api.ListRecorder",
    }
}


@pytest.fixture(autouse=True)
def frozen() -> Any:
    with freeze_time(T0) as clock:
        yield clock


@pytest.fixture
def viewer() -> Client:
    return staff_client("viewer", *VIEWS)


@pytest.fixture
def crowded() -> dict[str, Any]:
    saga = make_saga("crowded", now=T0)
    return {
        "saga": saga,
        "kept": keep_many(saga, MANY_KEPT, now=T0 - timedelta(days=1)),
        "delayed": delay_many(saga, ROWS_LISTED + 10, now=T0),
    }


def page_of(client: Client, saga: SagaInstance) -> Any:
    page = client.get(admin_url("sagainstance", "change", saga.pk))
    assert page.status_code == 200
    return page


def inline_rows(page: Any, model: type) -> list[Any]:
    [inline] = [i for i in page.context["inline_admin_formsets"] if i.opts.model is model]
    return [form.original.pk for form in inline]


def link(page: Any, text: str) -> str:
    html = page.content.decode()
    match = re.search(rf'<a href="([^"]+)">{re.escape(text)}</a>', html)
    assert match is not None, text
    return match.group(1).replace("&amp;", "&")


def test_the_page_lists_the_50_oldest_kept_events_and_counts_them_all(
    viewer: Client, crowded: dict[str, Any]
) -> None:
    page = page_of(viewer, crowded["saga"])

    assert inline_rows(page, SagaKeptEvent) == crowded["kept"][:ROWS_LISTED]
    text = strip_tags(page.content.decode())
    assert f"{MANY_KEPT} kept events in all; the list below shows the {ROWS_LISTED} oldest." in text


def test_the_page_links_to_every_kept_event_of_the_saga(
    viewer: Client, crowded: dict[str, Any]
) -> None:
    other = make_saga("other", now=T0)
    keep_many(other, 3, now=T0)
    href = link(page_of(viewer, crowded["saga"]), "All kept events of this saga")

    everything = viewer.get(href)

    saga_id = crowded["saga"].pk
    assert href == f"{admin_url('sagakeptevent', 'changelist')}?saga__id__exact={saga_id}"
    assert everything.status_code == 200
    assert everything.context["cl"].result_count == MANY_KEPT


def test_the_page_lists_the_50_soonest_delayed_messages_and_links_to_all_that_wait(
    viewer: Client, crowded: dict[str, Any]
) -> None:
    delay_many(make_saga("other", now=T0), 3, now=T0)
    page = page_of(viewer, crowded["saga"])
    href = link(page, "All delayed messages of this saga")

    everything = viewer.get(href)

    assert inline_rows(page, SagaOutboxMessage) == crowded["delayed"][:ROWS_LISTED]
    text = strip_tags(page.content.decode())
    assert (
        f"{ROWS_LISTED + 10} delayed messages waiting in all; the list below shows the "
        f"{ROWS_LISTED} soonest." in text
    )
    assert everything.status_code == 200
    assert {row.pk for row in everything.context["cl"].queryset} == set(crowded["delayed"])


def test_a_page_with_few_rows_lists_them_all_and_one_without_says_none(viewer: Client) -> None:
    few = make_saga("few", now=T0)
    keep_many(few, 2, now=T0)
    delay_many(few, 1, now=T0)
    empty = make_saga("empty", now=T0)

    shown = strip_tags(page_of(viewer, few).content.decode())
    bare = page_of(viewer, empty)

    assert "2 kept events, listed below, oldest first." in shown
    assert "1 delayed message waiting for its delivery time, listed below." in shown
    assert [i.opts.model for i in bare.context["inline_admin_formsets"]] == [SagaTimeout]
    assert "All kept events of this saga" not in bare.content.decode()


def test_the_page_runs_as_many_queries_for_5000_kept_events_as_for_60(viewer: Client) -> None:
    few, many = make_saga("few", now=T0), make_saga("many", now=T0)
    keep_many(few, ROWS_LISTED + 10, now=T0)
    delay_many(few, ROWS_LISTED + 10, now=T0)
    keep_many(many, MANY_KEPT, now=T0)
    delay_many(many, 2 * ROWS_LISTED, now=T0)
    page_of(viewer, few)  # the session and permission caches warm up

    with CaptureQueriesContext(connection) as for_few:
        small = page_of(viewer, few)
    with CaptureQueriesContext(connection) as for_many:
        large = page_of(viewer, many)

    assert len(for_many) == len(for_few)
    assert len(large.content) < 1.2 * len(small.content)


def test_kept_payloads_on_the_capped_page_are_still_only_for_content_readers(
    crowded: dict[str, Any],
) -> None:
    RECORDED.clear()
    with override_settings(BSFT_SAGA=RECORDER):
        hidden = page_of(staff_client("plain", *VIEWS), crowded["saga"]).content.decode()
        shown = page_of(staff_client("reader", *VIEWS, CONTENT), crowded["saga"]).content.decode()

    assert KEPT_SECRET not in hidden
    assert shown.count(KEPT_SECRET) == ROWS_LISTED
    assert len(RECORDED) == 1  # the reader's view of the page, once
    RECORDED.clear()
