"""The admin in a real browser: headless Chromium, driven by Playwright, against a live server.

A view-only operator (every view permission and the requeue action, not the content
permission) and a content reader log in through the login form, open every changelist and
change page, and the operator runs the requeue action. What each sees and what stays hidden
is asserted on the rendered page; every view of content must have been audited.

The browser is the system's Chromium (Debian's ``chromium`` package), never one Playwright
downloads. Without it, or without the ``playwright`` package, the tests skip with the reason;
under ``CI=true`` that is a failure (tests/support/services.py), since CI installs both.

Screenshots of the instance page go to a temporary directory; set
``BSFT_SAGA_SCREENSHOT_DIR=docs/images`` to refresh the ones docs/operations/ shows.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings
from freezegun import freeze_time

from bsft_saga import clock, publish
from bsft_saga.admin.journal import JOURNAL_ENTRIES_LISTED, JOURNAL_PAGE_SIZE
from bsft_saga.audit import READ_CONTENT
from bsft_saga.models import (
    JournalKind,
    SagaAuditRecord,
    SagaDispatcher,
    SagaInstance,
    SagaKeptEvent,
    SagaOutboxMessage,
    SagaTimeout,
)
from bsft_saga.timeouts import drain_due
from bsft_saga.timeouts.expedite import fire_now
from tests.support.admin import (
    CONTENT,
    SECRET,
    VIEW_ALL,
    ContentRows,
    admin_url,
    make_content_rows,
    staff_user,
)
from tests.support.journal_rows import advanced_by_timer, entry, timer_canceled_by
from tests.support.services import in_ci
from tests.testapp.ops_events import QuoteSent
from tests.testapp.ops_flows import QuoteFollowUpFlow, make_saga, make_timer

pytestmark = pytest.mark.django_db(transaction=True)

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
LAUNCH_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PASSWORD = "pw"


def _unavailable(reason: str) -> None:
    if in_ci():
        pytest.fail(f"{reason}; CI requires it (.ci/run installs Debian's chromium)", pytrace=False)
    pytest.skip(f"{reason}; install it (apt-get install chromium) or set CI=true to fail")


def chromium_path() -> str | None:
    configured = os.environ.get("BSFT_SAGA_CHROMIUM")
    candidates = (configured,) if configured else CHROMIUM_CANDIDATES
    for candidate in candidates:
        if candidate and (Path(candidate).is_file() or shutil.which(candidate)):
            return candidate
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for the module, with a fresh profile."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        _unavailable(f"the playwright package is not installed ({exc})")
    executable = chromium_path()
    if executable is None:
        _unavailable(f"no Chromium at {', '.join(CHROMIUM_CANDIDATES)} (or BSFT_SAGA_CHROMIUM)")
    # Playwright's sync API keeps an asyncio loop in the test thread (inside a greenlet);
    # Django would take that for async code and refuse the tests' ORM calls.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_playwright() as playwright, tempfile.TemporaryDirectory() as profile:
        context = playwright.chromium.launch_persistent_context(
            profile, executable_path=executable, headless=True, args=LAUNCH_FLAGS
        )
        context.set_default_timeout(10_000)  # a missing element fails fast, not after 30 s
        try:
            yield context
        finally:
            context.close()
            if previous is None:
                del os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"]
            else:
                os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def screenshots(tmp_path: Path) -> Path:
    configured = os.environ.get("BSFT_SAGA_SCREENSHOT_DIR")
    return Path(configured) if configured else tmp_path


@pytest.fixture
def rows() -> ContentRows:
    return make_content_rows("quote-17")


class AdminSession:
    """One logged-in user in its own page; ``open`` asserts the page rendered."""

    def __init__(self, browser: Any, base_url: str, username: str) -> None:
        browser.clear_cookies()
        self.page = browser.new_page()
        self.base_url = base_url
        self.page.goto(f"{base_url}/admin/login/?next=/admin/")
        self.page.fill("#id_username", username)
        self.page.fill("#id_password", PASSWORD)
        self.page.click("input[type=submit]")
        # click() returns once the next page's navigation has begun, not once it has loaded.
        self.page.wait_for_load_state("load")
        assert self.page.locator("#user-tools").is_visible(), self.page.content()

    def open(self, path: str) -> str:
        response = self.page.goto(self.base_url + path)
        assert response is not None, path
        assert response.status == 200, path
        return str(self.page.inner_text("#content"))

    def close(self) -> None:
        self.page.close()


@pytest.fixture
def operator(browser: Any, live_server: Any) -> Iterator[AdminSession]:
    """View-only for content: every view permission and the requeue action."""
    staff_user("operator", *VIEW_ALL, "change_sagatimeout")
    session = AdminSession(browser, live_server.url, "operator")
    yield session
    session.close()


@pytest.fixture
def reader(browser: Any, live_server: Any) -> Iterator[AdminSession]:
    staff_user("reader", *VIEW_ALL, CONTENT)
    session = AdminSession(browser, live_server.url, "reader")
    yield session
    session.close()


# The form rows of the content fields on a change page.
CONTENT_ROWS = ", ".join(
    f".field-{name}" for name in ("state_json", "payload_json", "last_error", "dead_letter_reason")
)

CHANGELISTS = {
    "sagainstance": "quote-17",
    "sagatimeout": "dead",
    "sagaoutboxmessage": "tests.ops.noted",
    "sagaauditrecord": "",
}


def test_the_operator_sees_every_list_and_page_without_content(
    rows: ContentRows, operator: AdminSession, screenshots: Path
) -> None:
    for model, marker in CHANGELISTS.items():
        text = operator.open(admin_url(model, "changelist"))
        assert marker in text
        assert SECRET not in operator.page.content()

    for name, url in rows.change_urls().items():
        operator.open(url)
        assert SECRET not in operator.page.content(), name
        assert operator.page.locator(CONTENT_ROWS).count() == 0, name

    text = operator.open(rows.change_urls()["instance"])
    assert "dead" in text  # the timer inline is metadata
    assert "pending" in text
    assert "All timers of this saga" in text
    operator.page.screenshot(path=str(screenshots / "admin-instance-operator.png"), full_page=True)
    assert not SagaAuditRecord.objects.exists()


def test_the_content_reader_sees_state_payloads_and_errors_each_view_audited(
    rows: ContentRows, reader: AdminSession, screenshots: Path
) -> None:
    for model in CHANGELISTS:
        reader.open(admin_url(model, "changelist"))
        assert SECRET not in reader.page.content()
    assert not SagaAuditRecord.objects.exists()

    for name, url in rows.change_urls().items():
        reader.open(url)
        assert SECRET in reader.page.content(), name
        assert reader.page.locator(CONTENT_ROWS).count() >= 1, name

    reader.open(rows.change_urls()["instance"])
    assert reader.page.locator("pre", has_text=SECRET).is_visible()
    reader.page.screenshot(path=str(screenshots / "admin-instance-reader.png"), full_page=True)
    records = SagaAuditRecord.objects.filter(username="reader")
    assert records.count() == len(rows.change_urls()) + 1
    assert set(records.values_list("instance_id", flat=True)) == {rows.saga.pk, None}


def test_the_operator_requeues_a_dead_letter_from_the_timer_list(
    rows: ContentRows, operator: AdminSession
) -> None:
    operator.open(admin_url("sagatimeout", "changelist") + "?outcome=dead_lettered")
    operator.page.check(f"input[name=_selected_action][value='{rows.dead.pk}']")
    operator.page.select_option("select[name=action]", "requeue_dead_lettered")
    operator.page.click("button[name=index]")

    message = operator.page.locator("ul.messagelist li.success")
    assert "1 dead-lettered timer was requeued" in message.inner_text()
    requeued = SagaTimeout.objects.get(pk=rows.dead.pk)
    assert (requeued.outcome, requeued.dispatched_at, requeued.attempts) == (None, None, 0)


def test_the_content_reader_is_not_offered_the_requeue_action(
    rows: ContentRows, reader: AdminSession
) -> None:
    reader.open(admin_url("sagatimeout", "changelist"))

    assert reader.page.locator("select[name=action]").count() == 0


# -- layout -------------------------------------------------------------------------------

VIEWPORT = {"width": 1400, "height": 900}
LONG_SAGA_TYPE = "billing.subscriptions.dunning-with-escalation-to-collections"
LONG_KEY = "customer-004711/subscription-2026-000123/invoice-2026-12-000987"
LONG_EVENT_TYPE = "billing.subscriptions.payment-reminder-due-after-grace-period"


@pytest.fixture
def long_rows() -> SagaInstance:
    """Rows as a real deployment has them: dotted saga and event types, composite keys, a
    timer of every status, outbox rows and audit records naming them."""
    saga = make_saga(LONG_KEY, saga_type=LONG_SAGA_TYPE)
    for name, outcome in (("payment-reminder-1", "fired"), ("payment-reminder-2", None)):
        make_timer(saga, name, outcome=outcome, event_type=LONG_EVENT_TYPE)
    make_timer(saga, "escalate", outcome="dead_lettered", event_type=LONG_EVENT_TYPE)
    for _ in range(3):
        SagaOutboxMessage.objects.create(
            saga=saga,
            event_type=LONG_EVENT_TYPE,
            payload={},
            created_at=clock.now(),
            deliver_at=clock.now() + timedelta(hours=1),
            correlation_id="req-" + "7" * 32,
        )
        SagaAuditRecord.objects.create(
            action=READ_CONTENT,
            username="operator.with.a.long.name@example.com",
            saga_type=LONG_SAGA_TYPE,
            correlation_key=LONG_KEY,
            instance_id=saga.pk,
            correlation_id="req-" + "7" * 32,
            recorded_at=clock.now(),
        )
    return saga


@pytest.fixture
def root(browser: Any, live_server: Any) -> Iterator[AdminSession]:
    """A superuser: every action offered, so every list has its checkbox column."""
    staff_user("root", superuser=True)
    session = AdminSession(browser, live_server.url, "root")
    yield session
    session.close()


def test_every_changelist_fits_a_1400_px_wide_window(
    long_rows: SagaInstance, root: AdminSession
) -> None:
    root.page.set_viewport_size(VIEWPORT)
    for model in CHANGELISTS:
        root.open(admin_url(model, "changelist"))
        width = root.page.evaluate(
            """() => ({
                table: document.querySelector('#result_list').getBoundingClientRect().right,
                scroll: document.querySelector('#changelist-form .results').scrollWidth,
                client: document.querySelector('#changelist-form .results').clientWidth,
                page: document.documentElement.scrollWidth,
            })"""
        )
        assert width["table"] <= VIEWPORT["width"], (model, width)
        assert width["scroll"] <= width["client"], (model, width)
        assert width["page"] <= VIEWPORT["width"], (model, width)


#: Longer than any window is wide, without a space or hyphen to break at: what an
#: application may store (the fields hold up to 200 characters).
UNBREAKABLE_SAGA_TYPE = "billing." + "s" * 150
UNBREAKABLE_KEY = "k" * 180
UNBREAKABLE_NAME = "reminder" + "r" * 150
UNBREAKABLE_EVENT_TYPE = "billing." + "e" * 150
UNBREAKABLE_TEXT = "x" * 400

#: Where a change page overflows the window: the document, and every element that is not
#: inside a box of its own that scrolls (a ``<pre>`` may scroll within itself).
OVERFLOW = """() => {
    const width = document.documentElement.clientWidth;
    const scrolls = (el) => ['auto', 'scroll'].includes(getComputedStyle(el).overflowX);
    const inScrollingBox = (el) => {
        for (let up = el.parentElement; up && up !== document.body; up = up.parentElement) {
            if (scrolls(up)) return true;
        }
        return false;
    };
    const wide = [];
    for (const el of document.querySelectorAll('#container *')) {
        const rect = el.getBoundingClientRect();
        if (rect.width && rect.right > width + 0.5 && !inScrollingBox(el)) {
            wide.push(`${el.tagName.toLowerCase()}.${el.className}: ${Math.round(rect.right)}`);
        }
    }
    return {page: document.documentElement.scrollWidth, width, wide: wide.slice(0, 8)};
}"""


@pytest.fixture
def unbreakable_rows() -> dict[str, str]:
    """A saga, a timer, an outbox row, an audit record and journal entries whose types, keys,
    names, ids and payloads have no place to break; the change pages showing them."""
    saga = make_saga(UNBREAKABLE_KEY, saga_type=UNBREAKABLE_SAGA_TYPE)
    SagaInstance.objects.filter(pk=saga.pk).update(state={"note": UNBREAKABLE_TEXT})
    claimed, dead = (
        make_timer(
            saga,
            UNBREAKABLE_NAME + (outcome or ""),
            outcome=outcome,
            event_type=UNBREAKABLE_EVENT_TYPE,
            reason=UNBREAKABLE_TEXT,
        )
        for outcome in (None, "dead_lettered")
    )
    SagaTimeout.objects.filter(saga=saga).update(
        payload={"note": UNBREAKABLE_TEXT}, correlation_id="req-" + "7" * 190
    )
    dispatcher = SagaDispatcher.objects.create(
        host="ip-" + "10" * 100,
        pid=4242,
        kind="loop",
        started_at=clock.now(),
        last_pass_at=clock.now(),
    )
    SagaTimeout.objects.filter(pk=claimed.pk).update(
        claimed_by=dispatcher.pk, claimed_until=clock.now() + timedelta(minutes=5)
    )
    SagaKeptEvent.objects.create(
        saga=saga,
        step_index=2,
        event_type=UNBREAKABLE_EVENT_TYPE,
        payload={"note": UNBREAKABLE_TEXT},
        message_id=uuid.uuid4(),
        correlation_id="req-" + "7" * 190,
        kept_at=clock.now(),
    )
    outbox = SagaOutboxMessage.objects.create(
        saga=saga,
        event_type=UNBREAKABLE_EVENT_TYPE,
        payload={"note": UNBREAKABLE_TEXT},
        created_at=clock.now(),
        correlation_id="req-" + "7" * 190,
        last_error=UNBREAKABLE_TEXT,
    )
    record = SagaAuditRecord.objects.create(
        action=READ_CONTENT,
        username="u" * 150,
        saga_type=UNBREAKABLE_SAGA_TYPE,
        correlation_key=UNBREAKABLE_KEY,
        instance_id=saga.pk,
        correlation_id="req-" + "7" * 190,
        recorded_at=clock.now(),
    )
    advanced_by_timer(saga, clock.now(), timer_name=UNBREAKABLE_NAME)
    entry(
        saga,
        JournalKind.ADVANCED,
        clock.now(),
        event_type=UNBREAKABLE_EVENT_TYPE,
        correlation_id="req-" + "7" * 190,
        step_before=1,
        step_after=2,
    )
    return {
        "instance": admin_url("sagainstance", "change", saga.pk),
        "history": admin_url("sagainstance", "history", saga.pk),
        "timer": admin_url("sagatimeout", "change", dead.pk),
        "claimed timer": admin_url("sagatimeout", "change", claimed.pk),
        "outbox": admin_url("sagaoutboxmessage", "change", outbox.pk),
        "audit record": admin_url("sagaauditrecord", "change", record.pk),
    }


def _reschedule_form(session: AdminSession, timer: SagaTimeout) -> None:
    session.open(admin_url("sagatimeout", "changelist"))
    session.page.check(f"input[name=_selected_action][value='{timer.pk}']")
    session.page.select_option("select[name=action]", "reschedule_timeout")
    session.page.click("button[name=index]")
    session.page.wait_for_load_state("load")
    assert session.page.locator("#id_due_at").is_visible()


def test_every_change_page_fits_a_1400_px_wide_window(
    unbreakable_rows: dict[str, str], root: AdminSession
) -> None:
    root.page.set_viewport_size(VIEWPORT)
    overflowing = {}
    for name, url in {**unbreakable_rows, "reschedule form": ""}.items():
        if url:
            root.open(url)
        else:
            _reschedule_form(root, SagaTimeout.objects.get(name=UNBREAKABLE_NAME))
        assert UNBREAKABLE_KEY in root.page.inner_text("#content") or name == "outbox", name
        width = root.page.evaluate(OVERFLOW)
        if width["page"] > VIEWPORT["width"] or width["wide"]:
            overflowing[name] = width

    assert overflowing == {}
    # The content is there to overflow: the superuser reads it.
    root.open(unbreakable_rows["timer"])
    assert root.page.locator("pre", has_text=UNBREAKABLE_TEXT).is_visible()


# -- the instance page: its journal, and times ---------------------------------------------

#: How every bsft_saga admin page writes a moment: to the second, with the zone.
MOMENT_TEXT = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d (?:[A-Z]{2,5}|[+-]\d\d:\d\d)$")


def _journal_of(saga: SagaInstance, entries: int) -> None:
    """``entries`` journal entries of ``saga``, a minute apart, the newest now: timers that
    woke it, an operator who canceled one."""
    start = clock.now() - timedelta(minutes=entries)
    for n in range(entries - 1):
        advanced_by_timer(saga, start + timedelta(minutes=n), timer_name=f"remind-{n}")
    timer_canceled_by(saga, clock.now(), "night-shift", timer_name="escalate")


def _times(page: Any) -> list[str]:
    return [str(text) for text in page.locator("#content time").all_inner_texts()]


def test_the_instance_page_shows_the_newest_journal_entries_as_sentences(
    rows: ContentRows, operator: AdminSession
) -> None:
    _journal_of(rows.saga, JOURNAL_ENTRIES_LISTED + 5)

    operator.open(admin_url("sagainstance", "change", rows.saga.pk))

    # The top of the page: where it is, its flow's picture, then its journal.
    top = operator.page.locator("fieldset").first
    assert top.locator(".field-picture svg").is_visible()
    lines = top.locator(".field-timeline ol.saga-journal li")
    assert lines.count() == JOURNAL_ENTRIES_LISTED
    newest = lines.first.inner_text()
    assert "Timer canceled “escalate” by operator night-shift: at step 2." in newest
    assert "(timer “remind-23”): step 1 → 2, version 2." in lines.nth(1).inner_text()
    assert f"{JOURNAL_ENTRIES_LISTED + 5} entries in all" in operator.page.inner_text(
        ".field-timeline"
    )
    times = _times(operator.page)
    assert times
    assert all(MOMENT_TEXT.match(text) for text in times), times


def test_the_history_button_pages_through_the_whole_journal(
    rows: ContentRows, operator: AdminSession
) -> None:
    _journal_of(rows.saga, JOURNAL_PAGE_SIZE + 10)
    operator.open(admin_url("sagainstance", "change", rows.saga.pk))

    operator.page.click("a.historylink")
    operator.page.wait_for_load_state("load")

    assert "Journal of" in operator.page.inner_text("#content")
    assert operator.page.locator("ol.saga-journal li").count() == JOURNAL_PAGE_SIZE
    assert "night-shift" in operator.page.locator("ol.saga-journal li").first.inner_text()
    operator.page.click("p.paginator a.end")
    operator.page.wait_for_load_state("load")
    last_page = operator.page.locator("ol.saga-journal li")
    assert last_page.count() == 10
    assert "(timer “remind-0”)" in last_page.last.inner_text()
    assert f"{JOURNAL_PAGE_SIZE + 10} entries" in operator.page.inner_text("p.paginator")
    times = _times(operator.page)
    assert len(times) == 10
    assert all(MOMENT_TEXT.match(text) for text in times), times


def test_every_page_writes_its_times_to_the_second_with_the_zone(
    rows: ContentRows, operator: AdminSession
) -> None:
    _journal_of(rows.saga, 3)
    SagaAuditRecord.objects.create(
        action=READ_CONTENT,
        username="reader",
        saga_type=rows.saga.saga_type,
        recorded_at=clock.now(),
    )
    pages = [admin_url(model, "changelist") for model in CHANGELISTS]
    pages += list(rows.change_urls().values())

    for url in pages:
        operator.open(url)
        times = _times(operator.page)
        assert times, url
        assert all(MOMENT_TEXT.match(text) for text in times), (url, times)
        assert not re.search(r"\b[ap]\.m\.", operator.page.inner_text("#content")), url


# -- the screenshots of docs/operations/ -------------------------------------------------

JOURNEY_START = datetime(2026, 12, 1, 8, 0, 4, tzinfo=UTC)  # 09:00:04 in Berlin


def _quote_journey(key: str) -> SagaInstance:
    """The docs' quote follow-up, for real: sent, its follow-up fired early by an operator,
    then waiting for the answer (the deadline pending). The clock is frozen only while the
    rows are written, never while the browser runs."""
    operator = staff_user("night-shift")
    with freeze_time(JOURNEY_START) as frozen:
        publish(QuoteSent(key), correlation_id="req-7f3a")
        saga = SagaInstance.objects.get(saga_type=QuoteFollowUpFlow.saga_type, correlation_key=key)
        frozen.tick(timedelta(hours=26, minutes=12, seconds=31))
        follow_up = SagaTimeout.objects.get(saga=saga, name="followup")
        fire_now([follow_up.pk], user=operator)
        frozen.tick(timedelta(seconds=2))
        assert drain_due().fired == 1
    saga.refresh_from_db()
    return saga


@override_settings(TIME_ZONE="Europe/Berlin")
def test_the_screenshots_of_the_instance_page_and_the_status_panel(
    operator: AdminSession, screenshots: Path
) -> None:
    saga = _quote_journey("q-4711")
    _a_dispatcher_that_died_holding_claims(hours_ago=3, claims=3)
    operator.page.set_viewport_size(VIEWPORT)

    operator.open(admin_url("sagainstance", "change", saga.pk))
    lines = operator.page.locator(".field-timeline ol.saga-journal li").all_inner_texts()
    assert [line.split(" — ")[1].split("\n")[0] for line in lines] == [
        "Advanced on tests.ops.quote-follow-up-due (timer “followup”): step 1 → 2, version 2.",
        "Timer fired now “followup” by operator night-shift: at step 1.",
        "Started on tests.ops.quote-sent (published): → step 1, version 1.",
    ]
    assert lines[-1].startswith("2026-12-01 09:00:04 CET")
    assert operator.page.locator(".field-picture svg").is_visible()
    operator.page.screenshot(path=str(screenshots / "admin-instance-journal.png"), full_page=True)

    operator.open("/admin/bsft_saga/")
    panel = operator.page.locator("#saga-status")
    text = panel.inner_text()
    assert "celery worker-2:77\t3 h 0 min ago (stale)" in text
    assert "311 rows delivered, held 3 claims at its last pass" in text
    assert panel.locator("#saga-idle.saga-warning").inner_text() == "3 h 0 min ago"
    assert panel.locator("#saga-idle-warning.saga-warning").inner_text() == (
        "No dispatcher has passed in 3 h 0 min."
    )
    warning = panel.locator("#saga-idle-warning").evaluate("el => getComputedStyle(el).color")
    normal = panel.locator("th").first.evaluate("el => getComputedStyle(el).color")
    assert warning != normal
    last_passes = panel.locator("time").all_inner_texts()
    assert len(last_passes) == 1
    assert all(MOMENT_TEXT.match(text) for text in last_passes), last_passes
    operator.page.screenshot(path=str(screenshots / "admin-status-panel.png"), full_page=True)


def _a_dispatcher_that_died_holding_claims(*, hours_ago: int, claims: int) -> None:
    """A Celery worker killed ``hours_ago`` in the middle of a pass, holding ``claims``
    timers: their leases have run out since, and no dispatcher is left to claim them."""
    died = clock.now() - timedelta(hours=hours_ago)
    dead = SagaDispatcher.objects.create(
        host="worker-2",
        pid=77,
        kind="celery",
        started_at=died - timedelta(days=2),
        last_pass_at=died,
        delivered=311,
        claims=claims,
    )
    for n in range(claims):
        timer = make_timer(make_saga(f"o-{1001 + n}"), "reminder", due_at=died)
        SagaTimeout.objects.filter(pk=timer.pk).update(
            claimed_by=dead.pk, claimed_until=died + timedelta(minutes=5)
        )
