"""Every admin page shows a moment to the second, in the current time zone, naming the zone."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.contrib import admin
from django.db import models
from django.test import override_settings
from django.test.client import RequestFactory

from bsft_saga.admin.times import MomentColumn, format_moment
from bsft_saga.audit import READ_CONTENT
from bsft_saga.db.datetimes import Unreadable
from bsft_saga.models import (
    SagaAuditRecord,
    SagaDispatcher,
    SagaInstance,
    SagaOutboxMessage,
    SagaTimeout,
)
from tests.support.admin import admin_url, staff_client, staff_user
from tests.support.journal_rows import advanced_by_timer
from tests.testapp.ops_flows import make_saga, make_timer

pytestmark = pytest.mark.django_db

#: 14:20:05 in Berlin, in winter.
MOMENT = datetime(2026, 12, 1, 13, 20, 5, tzinfo=UTC)
SHOWN = "2026-12-01 14:20:05 CET"
# What Django's own format would have shown ("Dec. 1, 2026, 2:20 p.m.").
DJANGO_FORMAT = re.compile(r"\b[ap]\.m\.")


@pytest.mark.parametrize(
    ("zone", "value", "shown"),
    [
        ("UTC", MOMENT, "2026-12-01 13:20:05 UTC"),
        ("Europe/Berlin", MOMENT, SHOWN),
        ("Europe/Berlin", MOMENT - timedelta(days=180), "2026-06-04 15:20:05 CEST"),
        ("America/New_York", MOMENT, "2026-12-01 08:20:05 EST"),
        # Zones without an abbreviation: their offset, always as hours and minutes.
        ("Asia/Dubai", MOMENT, "2026-12-01 17:20:05 +04:00"),
        ("Asia/Kathmandu", MOMENT, "2026-12-01 19:05:05 +05:45"),
        ("America/Sao_Paulo", MOMENT, "2026-12-01 10:20:05 -03:00"),
        # The earliest moment stored: the year written with four digits.
        ("UTC", datetime(1, 1, 2, tzinfo=UTC), "0001-01-02 00:00:00 UTC"),
        # Microseconds are cut, not rounded: the moment shown has begun.
        ("UTC", MOMENT.replace(microsecond=999_999), "2026-12-01 13:20:05 UTC"),
    ],
)
def test_a_moment_is_shown_to_the_second_in_the_current_zone_naming_it(
    zone: str, value: datetime, shown: str
) -> None:
    with override_settings(TIME_ZONE=zone):
        assert format_moment(value) == shown
    assert format_moment(value.astimezone(ZoneInfo("Asia/Tokyo"))) == format_moment(value)


def test_no_moment_is_the_admins_empty_value_and_an_unreadable_one_is_shown_as_stored() -> None:
    assert format_moment(None) == "-"
    unreadable = Unreadable.of("10000-01-01 00:00:00+00")
    assert format_moment(unreadable) == "unreadable, stored as 10000-01-01 00:00:00+00"


def _shown(fieldsets: Any) -> list[Any]:
    names: list[Any] = []
    for _title, options in fieldsets:
        for name in options["fields"]:
            names += list(name) if isinstance(name, list | tuple) else [name]
    return names


def _plain_moments(model: type[models.Model], names: list[Any]) -> set[str]:
    """The DateTimeFields among ``names`` that Django would format its own way."""
    fields = {f.name for f in model._meta.concrete_fields if isinstance(f, models.DateTimeField)}
    return {name for name in names if isinstance(name, str)} & fields


def test_no_admin_page_of_bsft_saga_shows_a_moment_in_djangos_format() -> None:
    """A DateTimeField added later to a list, a change page or an inline is covered too."""
    request = RequestFactory().get("/")
    request.user = staff_user("root", superuser=True)
    saga = make_saga("every-field")
    make_timer(saga)
    columns = 0
    for model, model_admin in admin.site._registry.items():
        if model._meta.app_label != "bsft_saga":
            continue
        obj = saga if model is SagaInstance else model._default_manager.first()
        listed = list(model_admin.get_list_display(request))
        shown = _shown(model_admin.get_fieldsets(request, obj))
        assert not _plain_moments(model, listed + shown), model
        for inline_class in model_admin.inlines:  # every inline, shown or not on this page
            inline = inline_class(model, admin.site)
            inline_shown = _shown(inline.get_fieldsets(request, obj))
            assert not _plain_moments(inline.model, inline_shown), inline
            columns += sum(isinstance(name, MomentColumn) for name in inline_shown)
        columns += sum(isinstance(name, MomentColumn) for name in listed + shown)
    assert columns >= 25


@pytest.fixture
def berlin_rows() -> dict[str, Any]:
    """One row of each model, every moment at ``MOMENT``, shown in Berlin."""
    saga = make_saga("berlin", now=MOMENT)
    timer = make_timer(saga, "remind", due_at=MOMENT)
    outbox = SagaOutboxMessage.objects.create(
        saga=saga, event_type="tests.ops.noted", payload={}, created_at=MOMENT
    )
    SagaAuditRecord.objects.create(
        action=READ_CONTENT, username="alice", saga_type=saga.saga_type, recorded_at=MOMENT
    )
    advanced_by_timer(saga, MOMENT)
    return {"saga": saga, "timer": timer, "outbox": outbox}


PAGES = [
    ("sagainstance", "changelist", None),
    ("sagainstance", "change", "saga"),  # its fields, its timers inline, its journal
    ("sagainstance", "history", "saga"),
    ("sagatimeout", "changelist", None),
    ("sagatimeout", "change", "timer"),
    ("sagaoutboxmessage", "changelist", None),
    ("sagaoutboxmessage", "change", "outbox"),
    ("sagaauditrecord", "changelist", None),
]


@override_settings(TIME_ZONE="Europe/Berlin")
@pytest.mark.parametrize(("model", "view", "row"), PAGES)
def test_every_page_shows_its_moments_with_seconds_and_zone(
    berlin_rows: dict[str, Any], model: str, view: str, row: str | None
) -> None:
    client = staff_client("root", superuser=True)
    args = [berlin_rows[row].pk] if row else []

    page = client.get(admin_url(model, view, *args)).content.decode()

    assert SHOWN in page
    assert f'<time datetime="{MOMENT.isoformat()}">{SHOWN}</time>' in page
    assert not DJANGO_FORMAT.search(page)


@override_settings(TIME_ZONE="Europe/Berlin")
def test_the_status_panel_shows_each_dispatchers_last_pass_with_seconds_and_zone() -> None:
    SagaDispatcher.objects.create(
        host="web-1", pid=4242, kind="loop", started_at=MOMENT, last_pass_at=MOMENT
    )

    page = staff_client("root", superuser=True).get("/admin/bsft_saga/").content.decode()

    assert f'last pass <time datetime="{MOMENT.isoformat()}">{SHOWN}</time>' in page


def test_a_missing_moment_is_the_empty_value_on_the_change_page() -> None:
    saga = make_saga("no-deadline")
    assert saga.deadline is None

    page = staff_client("root", superuser=True).get(admin_url("sagainstance", "change", saga.pk))

    assert re.search(
        r'field-deadline">.*?<div class="readonly">-</div>', page.content.decode(), re.S
    )


@override_settings(TIME_ZONE="Europe/Berlin")
def test_the_reschedule_page_shows_the_due_time_and_its_message_the_new_one(
    berlin_rows: dict[str, Any],
) -> None:
    client = staff_client("root", superuser=True)
    timer: SagaTimeout = berlin_rows["timer"]
    SagaTimeout.objects.filter(pk=timer.pk).update(due_at=MOMENT + timedelta(days=1))
    post = {"action": "reschedule_timeout", "_selected_action": [str(timer.pk)]}

    form = client.post(admin_url("sagatimeout", "changelist"), post)
    moved = client.post(
        admin_url("sagatimeout", "changelist"),
        {**post, "post": "yes", "due_at": "2026-12-24T18:00:00"},
        follow=True,
    )

    assert "is due at <time" in form.content.decode()
    assert "2026-12-02 14:20:05 CET</time>" in form.content.decode()
    assert "Timer &#x27;remind&#x27; is due at 2026-12-24 18:00:00 CET." in moved.content.decode()


def test_a_moment_column_still_sorts_by_its_field() -> None:
    saga = make_saga("sorted")
    later, sooner = (
        make_timer(saga, name, due_at=MOMENT + delta)
        for name, delta in (("later", timedelta(hours=1)), ("sooner", timedelta(0)))
    )
    client = staff_client("root", superuser=True)
    column = client.get(admin_url("sagatimeout", "changelist")).context["cl"].list_display
    due = [str(name) for name in column].index("due_at")

    for order, expected in ((f"{due}", [sooner, later]), (f"-{due}", [later, sooner])):
        listed = client.get(admin_url("sagatimeout", "changelist") + f"?o={order}")
        assert list(listed.context["cl"].result_list) == expected
    assert 'class="sortable column-due_at' in listed.content.decode()
