"""An instance's journal in the admin: the timeline on its page and the *History* page."""

from __future__ import annotations

from datetime import timedelta
from html import unescape
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.test import Client
from django.utils.html import strip_tags
from freezegun.api import FrozenDateTimeFactory

from bsft_saga import publish
from bsft_saga.admin.journal import JOURNAL_ENTRIES_LISTED, JOURNAL_PAGE_SIZE, describe
from bsft_saga.models import JournalKind, JournalVia, SagaInstance, SagaJournalEntry
from bsft_saga.timeouts import drain_due
from tests.support.admin import admin_url, staff_client, staff_user
from tests.support.journal_rows import advanced_by_timer, entry, timer_canceled_by
from tests.support.timer_fixtures import T0
from tests.testapp.dispatch_events import InvoicePaid, InvoiceSent
from tests.testapp.dispatch_flows import InvoiceFlow
from tests.testapp.ops_flows import make_saga

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer() -> Client:
    """Staff who may view instances, and nothing else: no content permission."""
    return staff_client("viewer", "view_sagainstance")


@pytest.fixture
def timer_viewer() -> Client:
    """Staff who may view instances and timers (so their names), no content permission."""
    return staff_client("timer-viewer", "view_sagainstance", "view_sagatimeout")


def _sentences(html: str) -> list[str]:
    """The journal lines of a page, as text, in page order."""
    body = html.split('<ol class="saga-journal">', 1)[1].split("</ol>", 1)[0]
    items = body.split("<li>")[1:]
    return [" ".join(unescape(strip_tags(item.replace("<br>", " "))).split()) for item in items]


def _page(client: Client, saga: SagaInstance, view: str = "change", query: str = "") -> str:
    response = client.get(admin_url("sagainstance", view, saga.pk) + query)
    assert response.status_code == 200
    return str(response.content.decode())


def test_an_entry_reads_as_a_sentence_with_its_moment_and_ids() -> None:
    saga = make_saga("j-sentence")
    advanced = advanced_by_timer(saga, T0, timer_name="remind")
    SagaJournalEntry.objects.filter(pk=advanced.pk).update(correlation_id="req-7")

    [line] = _sentences(_page(staff_client("v", "view_sagainstance", "view_sagatimeout"), saga))

    assert line == (
        f"2026-03-02 09:00:00 UTC — Advanced on tests.ops.advanced (timer “remind”): "
        f"step 1 → 2, version 2. correlation id req-7 · message id {advanced.message_id}"
    )


@pytest.mark.parametrize(
    ("kind", "fields", "sentence"),
    [
        (
            JournalKind.STARTED,
            {"event_type": "orders.placed", "step_before": None, "step_after": 1, "version": 1},
            "Started on orders.placed (published): → step 1, version 1.",
        ),
        (
            JournalKind.HANDLED,
            {"via": JournalVia.OUTBOX, "step_before": 2, "step_after": 2, "version": 5},
            "Handled on tests.ops.handled (from the outbox): at step 2, version 5.",
        ),
        (
            JournalKind.ADVANCED,
            {"via": JournalVia.KEPT, "step_before": 1, "step_after": 2},
            "Advanced on tests.ops.advanced (a kept event): step 1 → 2, version 2.",
        ),
        (
            JournalKind.EXPIRED,
            {"via": JournalVia.TIMER, "step_before": 1, "step_after": 1, "version": 3},
            "Deadline expired on tests.ops.expired (a timer): at step 1, version 3.",
        ),
        (
            JournalKind.TERMINATED,
            {"via": JournalVia.OPERATOR, "event_type": "", "step_before": 1, "step_after": 1},
            "Terminated by a command or code: at step 1, version 1.",
        ),
    ],
)
def test_each_kind_and_way_reads_as_a_sentence(
    kind: JournalKind, fields: dict[str, Any], sentence: str
) -> None:
    shown = entry(make_saga("j-kinds"), kind, T0, **fields)

    assert strip_tags(describe(shown)) == sentence


def test_an_operator_action_names_the_operator_and_the_timer() -> None:
    canceled = timer_canceled_by(make_saga("j-op"), T0, "night-shift")

    assert strip_tags(describe(canceled)) == (
        "Timer canceled “escalate” by operator night-shift: at step 2."
    )


def test_the_instance_page_lists_the_newest_entries_first_and_links_to_the_rest(
    timer_viewer: Client,
) -> None:
    saga = make_saga("j-many")
    total = JOURNAL_ENTRIES_LISTED + 5
    for n in range(total):
        advanced_by_timer(saga, T0 + timedelta(seconds=n), timer_name=f"t{n}", step_before=n)

    page = _page(timer_viewer, saga)

    lines = _sentences(page)
    assert len(lines) == JOURNAL_ENTRIES_LISTED
    assert lines[0].startswith(f"2026-03-02 09:00:{total - 1:02d} UTC")
    assert f"(timer “t{total - 1}”)" in lines[0]
    assert f"(timer “t{total - JOURNAL_ENTRIES_LISTED}”)" in lines[-1]
    assert f"{total} entries in all; the newest {JOURNAL_ENTRIES_LISTED}" in page
    assert f'href="{admin_url("sagainstance", "history", saga.pk)}">The whole journal' in page


def test_an_instance_without_entries_says_so(viewer: Client) -> None:
    page = _page(viewer, make_saga("j-none"))

    assert "No journal entries" in page
    assert "The whole journal" not in page


def test_the_journal_shows_no_state_or_payload(viewer: Client) -> None:
    saga = make_saga("j-content")
    SagaInstance.objects.filter(pk=saga.pk).update(state={"email": "customer-4711@example.com"})
    advanced_by_timer(saga, T0)

    history = _page(viewer, saga, "history")

    assert "customer-4711" not in history
    assert "customer-4711" not in _page(viewer, saga)


def test_the_history_page_pages_the_whole_journal_newest_first(timer_viewer: Client) -> None:
    saga = make_saga("j-paged")
    total = JOURNAL_PAGE_SIZE + 7
    SagaJournalEntry.objects.bulk_create(
        SagaJournalEntry(
            saga=saga,
            at=T0 + timedelta(minutes=n),
            kind=JournalKind.HANDLED,
            via=JournalVia.TIMER,
            timer_name=f"remind-{n}",
            step_before=1,
            step_after=1,
            version=n + 2,
        )
        for n in range(total)
    )

    first = _page(timer_viewer, saga, "history")
    second = _page(timer_viewer, saga, "history", "?p=2")

    assert len(_sentences(first)) == JOURNAL_PAGE_SIZE
    assert f"(timer “remind-{total - 1}”)" in _sentences(first)[0]
    assert [line.split("(timer ")[1].split(")")[0] for line in _sentences(second)] == [
        f"“remind-{n}”" for n in reversed(range(7))
    ]
    assert f"{total} entries" in first
    assert '<a href="?p=2" class="end">2</a>' in first
    assert "Journal of" in first


def test_timer_names_are_left_out_for_a_viewer_who_may_not_see_timers(viewer: Client) -> None:
    saga = make_saga("j-unnamed")
    advanced_by_timer(saga, T0, timer_name="remind-unpaid-invoice")
    timer_canceled_by(saga, T0 + timedelta(hours=1), "night-shift", timer_name="escalate-to-legal")

    page, history = _page(viewer, saga), _page(viewer, saga, "history")

    for shown in (page, history):
        assert [line.split(" UTC — ")[1].split(" message id")[0] for line in _sentences(shown)] == [
            "Timer canceled by operator night-shift: at step 2.",
            "Advanced on tests.ops.advanced (a timer): step 1 → 2, version 2.",
        ]
        assert "remind-unpaid-invoice" not in shown
        assert "escalate-to-legal" not in shown


def test_timer_names_are_shown_to_a_viewer_who_may_see_timers(timer_viewer: Client) -> None:
    saga = make_saga("j-named")
    advanced_by_timer(saga, T0, timer_name="remind-unpaid-invoice")
    timer_canceled_by(saga, T0 + timedelta(hours=1), "night-shift", timer_name="escalate-to-legal")

    for shown in (_page(timer_viewer, saga), _page(timer_viewer, saga, "history")):
        canceled, advanced = _sentences(shown)
        assert "Timer canceled “escalate-to-legal” by operator night-shift" in canceled
        assert "(timer “remind-unpaid-invoice”)" in advanced


def test_the_history_page_needs_only_the_view_permission(viewer: Client) -> None:
    saga = make_saga("j-perm")
    advanced_by_timer(saga, T0)

    assert viewer.get(admin_url("sagainstance", "history", saga.pk)).status_code == 200
    staff_user("timers-only", "view_sagatimeout")
    outsider = Client()
    outsider.force_login(staff_user("no-instances"))
    assert outsider.get(admin_url("sagainstance", "history", saga.pk)).status_code == 403


def test_the_history_page_of_an_unknown_instance_redirects_like_its_page(viewer: Client) -> None:
    response = viewer.get(admin_url("sagainstance", "history", "0" * 32))

    assert response.status_code == 302


@pytest.mark.django_db(transaction=True)
def test_a_real_flow_and_an_operator_make_a_timeline_an_operator_reads(
    clock: FrozenDateTimeFactory,
) -> None:
    publish(InvoiceSent("j-real", remind_after_seconds=60), correlation_id="req-7")
    clock.tick(timedelta(seconds=61))
    assert drain_due().fired == 1
    clock.tick(timedelta(seconds=5))
    publish(InvoicePaid("j-real"), correlation_id="req-8")
    saga = SagaInstance.objects.get(saga_type=InvoiceFlow.saga_type, correlation_key="j-real")
    root = staff_client("root", superuser=True)
    clock.tick(timedelta(seconds=30))
    terminated = root.post(
        admin_url("sagainstance", "changelist"),
        {
            "action": "terminate_sagas",
            "_selected_action": [str(saga.pk)],
            "post": "yes",
            "reason": "customer left",
        },
    )
    assert terminated.status_code == 302

    lines = _sentences(_page(root, saga))

    assert [line.split(" correlation id")[0] for line in lines] == [
        "2026-03-02 09:01:36 UTC — Terminated by operator root: at step 3, version 4.",
        "2026-03-02 09:01:06 UTC — Advanced on tests.dispatch.invoice-paid (published): "
        "step 2 → 3, version 3.",
        "2026-03-02 09:01:01 UTC — Advanced on tests.dispatch.invoice-reminder-due "
        "(timer “reminder”): step 1 → 2, version 2.",
        "2026-03-02 09:00:00 UTC — Started on tests.dispatch.invoice-sent (published): "
        "→ step 1, version 1.",
    ]
    assert "correlation id req-8" in lines[1]
    assert not LogEntry.objects.exists()  # the History page shows the journal instead
