"""The admin and saga content: no URL lookups into it, every view of it audited, capped timers.

``SECRET`` sits in an instance's state, in timer payloads and error messages, and in outbox
payloads and errors (tests/support/admin.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client, override_settings

from bsft_saga import clock
from bsft_saga.audit import READ_CONTENT
from bsft_saga.models import SagaAuditRecord, SagaTimeout
from bsft_saga.timeouts.listing import RETIRED_TIMERS_LISTED
from tests.api.test_api import RECORDED
from tests.support.admin import (
    CONTENT,
    SECRET,
    VIEW_ALL,
    ContentRows,
    admin_url,
    make_content_rows,
    staff_client,
)
from tests.testapp.ops_flows import make_saga, make_timer

pytestmark = pytest.mark.django_db

LIST_RECORDER = "tests.api.test_api.ListRecorder"
FAILING_RECORDER = "tests.api.test_api.FailingRecorder"
READ = f"bsft_saga.{CONTENT}"


@pytest.fixture
def rows() -> ContentRows:
    return make_content_rows()


@pytest.fixture
def root() -> Client:
    return staff_client("root", superuser=True)


@pytest.fixture
def viewer() -> Client:
    """Staff with every view permission and not the content permission."""
    return staff_client("viewer", *VIEW_ALL)


@pytest.fixture
def reader() -> Client:
    """Staff with every view permission and the content permission."""
    return staff_client("reader", *VIEW_ALL, CONTENT)


@pytest.fixture
def recorded() -> Iterator[list[dict[str, Any]]]:
    RECORDED.clear()
    with override_settings(
        BSFT_SAGA={"API": {"READ_CONTENT_PERMISSION": READ, "AUDIT_RECORDER": LIST_RECORDER}}
    ):
        yield RECORDED
    RECORDED.clear()


# --- URL lookups on content -------------------------------------------------------------

CONTENT_LOOKUPS = [
    ("sagainstance", "state__email", SECRET),
    ("sagainstance", "state__email__startswith", "c"),
    ("sagainstance", "state__has_key", "email"),
    ("sagainstance", "state__isnull", "false"),
    ("sagainstance", "timeouts__payload__email", SECRET),
    ("sagainstance", "timeouts__last_error__contains", "4711"),
    ("sagainstance", "outbox_messages__payload__email", SECRET),
    ("sagatimeout", "payload__email", SECRET),
    ("sagatimeout", "last_error__startswith", "V"),
    ("sagatimeout", "dead_letter_reason__icontains", "customer"),
    ("sagatimeout", "saga__state__email", SECRET),
    ("sagaoutboxmessage", "payload__email__startswith", "c"),
    ("sagaoutboxmessage", "last_error", f"ConnectionError: {SECRET}"),
    ("sagaoutboxmessage", "saga__state__email", SECRET),
]


@pytest.mark.parametrize(("model", "lookup", "value"), CONTENT_LOOKUPS)
@pytest.mark.parametrize("who", ["superuser", "view-only"])
def test_a_changelist_refuses_lookups_on_content_with_400_for_everyone(
    rows: ContentRows, model: str, lookup: str, value: str, who: str
) -> None:
    client = (
        staff_client("root", superuser=True) if who == "superuser" else staff_client("v", *VIEW_ALL)
    )

    response = client.get(admin_url(model, "changelist"), {lookup: value})

    assert response.status_code == 400
    assert not SagaAuditRecord.objects.exists()


def test_lookups_on_metadata_still_filter(viewer: Client, rows: ContentRows) -> None:
    other = make_saga("someone-else")
    make_timer(other, "dead", outcome="dead_lettered")

    query = {"saga__id__exact": str(rows.saga.pk)}
    page = viewer.get(admin_url("sagatimeout", "changelist"), query)

    assert page.status_code == 200
    assert set(page.context["cl"].result_list) == {rows.dead, rows.pending}


# --- every view of content is audited ---------------------------------------------------


@pytest.mark.parametrize("page", ["instance", "timer", "outbox"])
def test_each_view_of_a_content_page_writes_one_audit_record_naming_the_saga(
    reader: Client, rows: ContentRows, recorded: list[dict[str, Any]], page: str
) -> None:
    url = rows.change_urls()[page]

    first = reader.get(url)
    reader.get(url)

    assert SECRET in first.content.decode()
    assert len(recorded) == 2
    assert recorded[0]["action"] == READ_CONTENT
    assert recorded[0]["user"].get_username() == "reader"
    assert (
        recorded[0]["saga_type"],
        recorded[0]["correlation_key"],
        recorded[0]["instance_id"],
    ) == (rows.saga.saga_type, "secret-1", rows.saga.pk)


def test_an_outbox_row_without_a_saga_is_audited_naming_no_saga(
    reader: Client, rows: ContentRows, recorded: list[dict[str, Any]]
) -> None:
    page = reader.get(rows.change_urls()["orphan outbox"])

    assert SECRET in page.content.decode()
    [record] = recorded
    assert (record["saga_type"], record["correlation_key"], record["instance_id"]) == (
        "",
        None,
        None,
    )


def test_the_default_recorder_stores_the_outbox_read(reader: Client, rows: ContentRows) -> None:
    reader.get(rows.change_urls()["outbox"])

    [record] = SagaAuditRecord.objects.all()
    assert (record.username, record.instance_id) == ("reader", rows.saga.pk)


@pytest.mark.parametrize("page", ["instance", "timer", "outbox", "orphan outbox"])
def test_an_operator_without_the_content_permission_sees_no_content_and_is_not_audited(
    viewer: Client, rows: ContentRows, page: str
) -> None:
    response = viewer.get(rows.change_urls()[page])

    assert response.status_code == 200
    assert SECRET not in response.content.decode()
    assert not SagaAuditRecord.objects.exists()


@pytest.mark.parametrize("page", ["instance", "timer", "outbox", "orphan outbox"])
def test_without_an_audit_recorder_no_admin_page_shows_content(
    root: Client, rows: ContentRows, page: str
) -> None:
    unaudited = {"API": {"READ_CONTENT_PERMISSION": READ, "AUDIT_RECORDER": None}}
    with override_settings(BSFT_SAGA=unaudited):
        response = root.get(rows.change_urls()[page])

    assert response.status_code == 200
    assert SECRET not in response.content.decode()
    assert not SagaAuditRecord.objects.exists()


def test_a_failing_recorder_serves_no_content(reader: Client, rows: ContentRows) -> None:
    failing = {"API": {"READ_CONTENT_PERMISSION": READ, "AUDIT_RECORDER": FAILING_RECORDER}}
    with override_settings(BSFT_SAGA=failing), pytest.raises(RuntimeError, match="audit store"):
        reader.get(rows.change_urls()["instance"])


def test_changelists_show_no_content_even_to_a_content_reader(
    reader: Client, rows: ContentRows
) -> None:
    for model in ("sagainstance", "sagatimeout", "sagaoutboxmessage"):
        page = reader.get(admin_url(model, "changelist"))
        assert page.status_code == 200
        assert SECRET not in page.content.decode()
    assert not SagaAuditRecord.objects.exists()


# --- the instance page caps its timers --------------------------------------------------


def retire_many(saga: Any, count: int) -> list[int]:
    """``count`` fired occurrences of a recurring timer, the i-th retired i minutes ago."""
    now = clock.now()
    rows = SagaTimeout.objects.bulk_create(
        [
            SagaTimeout(
                saga=saga,
                name="tick",
                due_at=now - timedelta(minutes=count - number),
                event_type="tests.ops.reminder-due",
                payload={},
                scheduled_step_index=1,
                scheduled_at=now - timedelta(days=1),
                dispatched_at=now - timedelta(minutes=count - number),
                outcome="fired",
            )
            for number in range(count)
        ]
    )
    return [row.pk for row in rows]


def test_the_instance_page_lists_every_pending_timer_and_the_newest_retired_ones(
    viewer: Client, rows: ContentRows
) -> None:
    retired = retire_many(rows.saga, RETIRED_TIMERS_LISTED + 10)  # dead one: retired too

    page = viewer.get(rows.change_urls()["instance"])

    [inline] = page.context["inline_admin_formsets"]
    listed = [form.original.pk for form in inline]
    newest_retired = [rows.dead.pk, *reversed(retired)][:RETIRED_TIMERS_LISTED]
    assert listed == [rows.pending.pk, *newest_retired]
    assert f"{RETIRED_TIMERS_LISTED + 12} timers in all" in page.content.decode()


def test_the_instance_page_links_to_all_of_its_timers(viewer: Client, rows: ContentRows) -> None:
    retire_many(rows.saga, RETIRED_TIMERS_LISTED + 10)
    link = f"{admin_url('sagatimeout', 'changelist')}?saga__id__exact={rows.saga.pk}"

    page = viewer.get(rows.change_urls()["instance"])
    everything = viewer.get(link)

    assert f'href="{link}"' in page.content.decode()
    assert everything.context["cl"].result_count == RETIRED_TIMERS_LISTED + 12
