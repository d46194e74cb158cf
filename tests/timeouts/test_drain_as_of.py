"""``drain_saga_timeouts --as-of``: fire what would be due at another moment, in development."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.core.management import CommandError
from django.test import override_settings

from bsft_saga import clock, publish
from tests.management.test_commands import TOTALS, completed, last_line, run
from tests.testapp.ops_events import ReminderRequested

pytestmark = pytest.mark.django_db

IN_A_DAY = 86_400


def in_iso(delta: timedelta) -> str:
    return (clock.now() + delta).isoformat()


@override_settings(DEBUG=True)
def test_as_of_fires_the_timers_due_by_that_moment_and_no_others() -> None:
    publish(ReminderRequested("tomorrow", delay_seconds=IN_A_DAY))
    publish(ReminderRequested("next-week", delay_seconds=7 * IN_A_DAY))

    out, _ = run("drain_saga_timeouts", "--as-of", in_iso(timedelta(days=2)))

    assert last_line(out) == TOTALS.format(1, 0, 0, 0, 0)
    assert completed("tomorrow", "next-week") == {"tomorrow"}


@override_settings(DEBUG=True, TIME_ZONE="Europe/Berlin")
def test_a_naive_as_of_is_read_in_time_zone() -> None:
    publish(ReminderRequested("naive", delay_seconds=IN_A_DAY))
    due = clock.now() + timedelta(days=1)

    def berlin_wall_clock(moment: datetime) -> str:
        return moment.astimezone(ZoneInfo("Europe/Berlin")).replace(tzinfo=None).isoformat()

    # Read as UTC, a Berlin wall-clock time just before the due time would be after it.
    early, _ = run("drain_saga_timeouts", "--as-of", berlin_wall_clock(due - timedelta(minutes=1)))
    late, _ = run("drain_saga_timeouts", "--as-of", berlin_wall_clock(due + timedelta(minutes=1)))

    assert last_line(early) == TOTALS.format(0, 0, 0, 0, 0)
    assert last_line(late) == TOTALS.format(1, 0, 0, 0, 0)


@override_settings(DEBUG=False)
def test_as_of_is_refused_when_debug_is_off() -> None:
    publish(ReminderRequested("prod", delay_seconds=IN_A_DAY))

    with pytest.raises(CommandError, match=r"DEBUG is off\. Pass --force"):
        run("drain_saga_timeouts", "--as-of", in_iso(timedelta(days=2)))

    assert completed("prod") == set()


@override_settings(DEBUG=False)
def test_force_allows_as_of_with_debug_off() -> None:
    publish(ReminderRequested("forced", delay_seconds=IN_A_DAY))

    run("drain_saga_timeouts", "--as-of", in_iso(timedelta(days=2)), "--force")

    assert completed("forced") == {"forced"}


@override_settings(DEBUG=True)
@pytest.mark.parametrize("value", ["tomorrow", "2026-13-01T00:00:00", ""])
def test_a_malformed_as_of_is_a_command_error_naming_it(value: str) -> None:
    with pytest.raises(CommandError, match=r"--as-of: .* is not an ISO 8601 date-time"):
        run("drain_saga_timeouts", "--as-of", value)


@override_settings(DEBUG=True)
def test_as_of_does_not_go_with_loop() -> None:
    with pytest.raises(CommandError, match="--as-of cannot be combined with --loop"):
        run(
            "drain_saga_timeouts", "--loop", "--as-of", datetime(2026, 3, 2, tzinfo=UTC).isoformat()
        )
