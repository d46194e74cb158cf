"""Catch-up policies: what one pass does with a backlog of timers that came due while
nothing was draining (``CatchUpPolicy``).

Each test schedules quotes, jumps the clock days ahead as if the dispatcher had been down,
and drains once. A QuoteFlow instance has two reminders: "followup" due after 2 days and
"callback" due after 3 days.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.test import override_settings
from freezegun.api import FrozenDateTimeFactory

from bsft_saga import publish
from bsft_saga.models import SagaTimeout, TimeoutOutcome
from bsft_saga.timeouts import drain_due
from tests.support import telemetry as telemetry_fixtures
from tests.support.timer_fixtures import T0
from tests.testapp.events import QuoteCallbackDue, QuoteFollowUpDue, QuoteSent, TaskOpened
from tests.testapp.timer_flows import QuoteFlow, Recorder, TaskFlow, the_saga, timers_of

pytestmark = pytest.mark.django_db


def policy(name: str, delivery: dict[str, Any] | None = None, **options: Any) -> Any:
    return override_settings(
        BSFT_SAGA={"TIMEOUTS": {"CATCH_UP_POLICY": name, **options}, "DELIVERY": delivery or {}}
    )


@pytest.fixture
def reminders() -> Iterator[Recorder]:
    recorder = Recorder(QuoteFollowUpDue, QuoteCallbackDue).connect()
    yield recorder
    recorder.disconnect()


@pytest.fixture
def backlog(clock: FrozenDateTimeFactory) -> FrozenDateTimeFactory:
    """Three quotes sent an hour apart, then five days of downtime."""
    for key in ("q-1", "q-2", "q-3"):
        publish(QuoteSent(key))
        clock.tick(timedelta(hours=1))
    clock.move_to(T0 + timedelta(days=5))
    return clock


def outcomes(key: str) -> dict[str, str | None]:
    return {row.name: row.outcome for row in timers_of(QuoteFlow, key)}


# --- fire_all -------------------------------------------------------------------------------


def test_fire_all_replays_the_whole_backlog_oldest_first(backlog: Any, reminders: Recorder) -> None:
    with policy("fire_all"):
        report = drain_due()

    assert (report.fired, report.missed) == (6, 0)
    assert reminders.events == [
        QuoteFollowUpDue("q-1"),
        QuoteFollowUpDue("q-2"),
        QuoteFollowUpDue("q-3"),
        QuoteCallbackDue("q-1"),
        QuoteCallbackDue("q-2"),
        QuoteCallbackDue("q-3"),
    ]


def test_fire_all_is_the_default_policy(backlog: Any, reminders: Recorder) -> None:
    report = drain_due()

    assert (report.fired, report.missed) == (6, 0)


# --- fire_latest_per_saga ------------------------------------------------------------------


def test_fire_latest_per_saga_fires_only_the_newest_overdue_timer_of_each_saga(
    backlog: Any, reminders: Recorder
) -> None:
    with policy("fire_latest_per_saga"):
        report = drain_due()

    assert (report.fired, report.missed) == (3, 3)
    assert reminders.events == [
        QuoteCallbackDue("q-1"),
        QuoteCallbackDue("q-2"),
        QuoteCallbackDue("q-3"),
    ]


def test_fire_latest_per_saga_stamps_the_older_timers_missed(
    backlog: Any, reminders: Recorder
) -> None:
    with policy("fire_latest_per_saga"):
        drain_due()

    for key in ("q-1", "q-2", "q-3"):
        assert outcomes(key) == {
            "followup": TimeoutOutcome.MISSED,
            "callback": TimeoutOutcome.FIRED,
        }
    missed = SagaTimeout.objects.filter(outcome=TimeoutOutcome.MISSED)
    assert {row.dispatched_at for row in missed} == {T0 + timedelta(days=5)}


def test_fire_latest_per_saga_fires_a_sagas_only_overdue_timer(
    clock: FrozenDateTimeFactory, reminders: Recorder
) -> None:
    publish(QuoteSent("q-1"))
    clock.move_to(T0 + timedelta(days=2, hours=12))  # followup overdue, callback not yet due

    with policy("fire_latest_per_saga"):
        report = drain_due()

    assert (report.fired, report.missed) == (1, 0)
    assert outcomes("q-1") == {"followup": TimeoutOutcome.FIRED, "callback": None}


def test_fire_latest_per_saga_misses_an_old_timer_even_when_a_batch_holds_only_it(
    backlog: Any, reminders: Recorder
) -> None:
    with policy("fire_latest_per_saga", {"BATCH_SIZE": 1}):
        first = drain_due()

    assert (first.fired, first.missed) == (0, 1)
    assert outcomes("q-1") == {"followup": TimeoutOutcome.MISSED, "callback": None}
    assert reminders.envelopes == []


def test_fire_latest_per_saga_wakes_a_saga_once_with_its_newest_timer(
    clock: FrozenDateTimeFactory,
) -> None:
    publish(TaskOpened("t-1", nudge_after_seconds=3600))
    clock.move_to(T0 + timedelta(days=10))  # both the nudge and the escalation are overdue

    with policy("fire_latest_per_saga"):
        report = drain_due()

    assert (report.fired, report.missed) == (1, 1)
    saga = the_saga(TaskFlow, "t-1")
    assert (saga.step_index, saga.state["nudged"]) == (1, 0)  # the nudge never arrived
    assert {row.name: row.outcome for row in timers_of(TaskFlow, "t-1")} == {
        "nudge": TimeoutOutcome.MISSED,
        "escalate": TimeoutOutcome.FIRED,
    }


# --- skip_beyond_max_age ---------------------------------------------------------------------


def test_skip_beyond_max_age_discards_timers_overdue_by_more_than_the_max_age(
    clock: FrozenDateTimeFactory, reminders: Recorder
) -> None:
    publish(QuoteSent("q-1"))
    # followup overdue by 1.5 days, callback by half a day
    clock.move_to(T0 + timedelta(days=3, hours=12))

    with policy("skip_beyond_max_age", MAX_CATCH_UP_AGE=timedelta(days=1)):
        report = drain_due()

    assert (report.fired, report.missed) == (1, 1)
    assert reminders.events == [QuoteCallbackDue("q-1")]
    assert outcomes("q-1") == {"followup": TimeoutOutcome.MISSED, "callback": TimeoutOutcome.FIRED}


def test_skip_beyond_max_age_fires_a_timer_overdue_by_exactly_the_max_age(
    clock: FrozenDateTimeFactory, reminders: Recorder
) -> None:
    publish(QuoteSent("q-1"))
    clock.move_to(T0 + timedelta(days=3))  # followup overdue by exactly one day

    with policy("skip_beyond_max_age", MAX_CATCH_UP_AGE=timedelta(days=1)):
        report = drain_due()

    assert (report.fired, report.missed) == (2, 0)


def test_skip_beyond_max_age_accepts_seconds(
    clock: FrozenDateTimeFactory, reminders: Recorder
) -> None:
    publish(QuoteSent("q-1"))
    clock.move_to(T0 + timedelta(days=2, hours=2))

    with policy("skip_beyond_max_age", MAX_CATCH_UP_AGE=3600):
        report = drain_due()

    assert (report.fired, report.missed) == (0, 1)


def test_skip_beyond_max_age_defaults_to_one_day(backlog: Any, reminders: Recorder) -> None:
    # Five days in: every followup is 3 days late and every callback 2 days late.
    with policy("skip_beyond_max_age"):
        report = drain_due()

    assert (report.fired, report.missed) == (0, 6)
    assert reminders.envelopes == []


# --- missed timers are counted, not dropped --------------------------------------------------


@pytest.mark.parametrize("name", ["fire_latest_per_saga", "skip_beyond_max_age"])
def test_an_on_time_timer_is_never_missed(
    name: str, clock: FrozenDateTimeFactory, reminders: Recorder
) -> None:
    publish(QuoteSent("q-1"))
    clock.move_to(T0 + timedelta(days=2))

    with policy(name):
        report = drain_due()

    assert (report.fired, report.missed) == (1, 0)


def test_a_missed_timer_leaves_the_pending_set_and_frees_its_name(
    backlog: Any, reminders: Recorder
) -> None:
    with policy("skip_beyond_max_age"):
        drain_due()

    assert not SagaTimeout.objects.pending().exists()
    with policy("skip_beyond_max_age"):
        assert drain_due().missed == 0


def test_missed_timers_are_counted_by_the_missed_counter(backlog: Any, reminders: Recorder) -> None:
    otel = telemetry_fixtures.install()
    attributes = {"saga.type": QuoteFlow.saga_type}
    before = otel.counter_value("bsft.saga.timeout.missed", **attributes)

    with policy("fire_latest_per_saga"):
        drain_due()

    assert otel.counter_value("bsft.saga.timeout.missed", **attributes) == before + 3
