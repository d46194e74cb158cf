"""The status panel of the *Sagas* app index: its counts in words, its ages as people read
them, and what a dead dispatcher held told as of its last pass."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.utils.html import strip_tags
from freezegun import freeze_time

from bsft_saga.admin.times import format_duration
from bsft_saga.models import DispatcherKind, SagaDispatcher
from tests.support.admin import staff_client
from tests.testapp.ops_flows import make_saga, make_timer

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
APP_INDEX = "/admin/bsft_saga/"


def _dispatcher(idle: timedelta, *, delivered: int = 0, claims: int = 0) -> SagaDispatcher:
    return SagaDispatcher.objects.create(
        host="worker-2",
        pid=77,
        kind=DispatcherKind.CELERY,
        started_at=NOW - timedelta(days=2),
        last_pass_at=NOW - idle,
        delivered=delivered,
        claims=claims,
    )


def _panel() -> str:
    """The app index's status panel at ``NOW``, as a user who may view sagas sees it."""
    client = staff_client(f"v-{uuid.uuid4().hex[:6]}", "view_sagainstance")
    client.get(APP_INDEX)  # import the URLconf before freezegun patches datetime
    with freeze_time(NOW):
        page = client.get(APP_INDEX).content.decode()
    return page.split('<div class="module" id="saga-status">', 1)[1].split("</div>", 1)[0]


def _details(panel: str) -> list[str]:
    """The text of each dispatcher's detail line."""
    rows = panel.split('<tr class="saga-dispatcher-detail')[1:]
    return [" ".join(strip_tags(row.split(">", 1)[1].split("</tr>", 1)[0]).split()) for row in rows]


def test_a_live_dispatcher_s_counts_are_in_the_singular_for_one() -> None:
    _dispatcher(timedelta(seconds=2), delivered=1, claims=1)

    assert _details(_panel()) == [
        "last pass 2026-03-02 11:59:58 UTC; 1 row delivered, 1 claim held"
    ]


def test_a_live_dispatcher_s_counts_are_in_the_plural_for_many() -> None:
    _dispatcher(timedelta(seconds=2), delivered=18204, claims=0)

    assert _details(_panel()) == [
        "last pass 2026-03-02 11:59:58 UTC; 18204 rows delivered, 0 claims held"
    ]


def test_a_stale_dispatcher_s_claims_are_told_as_of_its_last_pass() -> None:
    _dispatcher(timedelta(hours=3), delivered=311, claims=3)

    panel = _panel()

    assert _details(panel) == [
        "last pass 2026-03-02 09:00:00 UTC; 311 rows delivered, held 3 claims at its last pass"
    ]
    assert "claims held" not in panel
    assert '<tr class="saga-dispatcher-detail saga-warning">' in panel


def test_the_panel_shows_a_long_idle_time_in_hours_and_minutes_in_the_warning_colour() -> None:
    _dispatcher(timedelta(hours=3, seconds=20), claims=1)

    panel = _panel()

    assert '<td id="saga-idle" class="saga-warning">3 h 0 min ago</td>' in panel
    assert "No dispatcher has passed in 3 h 0 min." in panel
    assert '<th scope="row">celery worker-2:77</th><td>3 h 0 min ago (stale)</td>' in panel
    assert "10820" not in panel


def test_the_panel_shows_a_long_lag_in_hours_and_minutes_in_the_warning_colour() -> None:
    _dispatcher(timedelta(seconds=1))
    make_timer(make_saga("late"), "late", due_at=NOW - timedelta(hours=2, minutes=5))

    panel = _panel()

    assert 'Lag</th><td class="saga-warning">2 h 5 min</td>' in panel
    assert '<td id="saga-idle">1 s ago</td>' in panel


@pytest.mark.parametrize(
    ("seconds", "decimals", "shown"),
    [
        (0.04, 1, "0.0 s"),
        (42.4, 0, "42 s"),
        (59.6, 0, "1 min 0 s"),
        (75, 0, "1 min 15 s"),
        (61.04, 1, "1 min 1 s"),
        (3599.6, 0, "1 h 0 min"),
        (10800, 0, "3 h 0 min"),
        (90061, 0, "1 d 1 h"),
        (-3, 0, "0 s"),
    ],
)
def test_a_length_of_time_is_written_in_its_two_largest_units(
    seconds: float, decimals: int, shown: str
) -> None:
    assert format_duration(seconds, decimals) == shown
