"""``bsft_saga.testing.SagaHarness`` and the ``saga_harness`` pytest fixture
(docs/testing.md): a frozen clock, and due timers drained on demand.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone

from bsft_saga.models import SagaInstance, TimeoutOutcome
from bsft_saga.testing import SagaHarness
from tests.testapp.events import (
    QuoteAccepted,
    QuoteFollowUpDue,
    QuoteSent,
    QuoteWithdrawn,
    TaskOpened,
)
from tests.testapp.timer_events import OfferAccepted, OfferSent, ProbeStarted
from tests.testapp.timer_flows import (
    PROBE_ACTIONS,
    OfferFlow,
    OfferState,
    QuoteFlow,
    Recorder,
    TaskFlow,
    schedule_probe_due,
)

START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)  # a Monday


@pytest.fixture
def harness(transactional_db: Any) -> Any:
    with SagaHarness(start=START) as harness:
        yield harness


# --- the example of docs/testing.md -------------------------------------------------------


def test_follow_up(saga_harness: SagaHarness) -> None:
    saga_harness.publish(OfferSent("o-1"))
    saga_harness.advance_time(timedelta(days=3))  # moves the clock, drains until nothing is due
    assert saga_harness.state(OfferFlow, "o-1").followed_up


# --- the fixture ---------------------------------------------------------------------------


def test_the_fixture_is_a_started_harness_with_time_standing_still(
    saga_harness: SagaHarness,
) -> None:
    first = timezone.now()

    assert isinstance(saga_harness, SagaHarness)
    assert first.microsecond == 0
    assert timezone.now() == first == saga_harness.now


def test_the_fixture_runs_on_a_transactional_database(
    saga_harness: SagaHarness, django_db_blocker: Any
) -> None:
    from django.db import connection

    assert not connection.in_atomic_block  # on_commit delivery runs as in production


# --- the clock -------------------------------------------------------------------------------


def test_time_stands_still_at_start(harness: SagaHarness) -> None:
    harness.publish(QuoteSent("q-1"))

    assert timezone.now() == START
    assert harness.now == START


def test_time_stands_still_in_other_threads(harness: SagaHarness) -> None:
    seen: list[datetime] = []
    thread = threading.Thread(target=lambda: seen.append(timezone.now()))
    thread.start()
    thread.join(timeout=10)

    assert seen == [START]


def test_advanced_time_is_seen_by_other_threads(harness: SagaHarness) -> None:
    harness.advance_time(timedelta(hours=5))
    seen: list[datetime] = []
    thread = threading.Thread(target=lambda: seen.append(timezone.now()))
    thread.start()
    thread.join(timeout=10)

    assert seen == [START + timedelta(hours=5)]


def test_the_default_start_is_now_truncated_to_the_second(transactional_db: Any) -> None:
    before = timezone.now().replace(microsecond=0)
    with SagaHarness() as harness:
        now = harness.now
    after = timezone.now()

    assert before <= now <= after
    assert now.microsecond == 0


def test_a_naive_start_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="aware"):
        SagaHarness(start=datetime(2026, 3, 2, 9, 0))


def test_leaving_the_harness_restores_the_real_clock(transactional_db: Any) -> None:
    with SagaHarness(start=datetime(2001, 1, 1, tzinfo=UTC)):
        pass

    assert timezone.now().year > 2001


def test_advance_time_outside_the_harness_is_an_error(transactional_db: Any) -> None:
    harness = SagaHarness(start=START)

    with pytest.raises(RuntimeError, match="not started"):
        harness.advance_time(timedelta(days=1))


def test_advance_time_cannot_go_backwards(harness: SagaHarness) -> None:
    with pytest.raises(ValueError, match="backwards"):
        harness.advance_time(timedelta(seconds=-1))


# --- advance_time and drain_timeouts --------------------------------------------------------


def test_advance_time_ends_at_the_target_time(harness: SagaHarness) -> None:
    harness.publish(OfferSent("o-1"))

    harness.advance_time(timedelta(days=3, hours=4))

    assert timezone.now() == START + timedelta(days=3, hours=4)


def test_advance_time_fires_each_timer_at_its_own_due_time(harness: SagaHarness) -> None:
    harness.publish(OfferSent("o-1"))

    harness.advance_time(timedelta(days=10))

    # The follow-up (day 2) schedules the last call two days after it woke (day 4).
    state = harness.state(OfferFlow, "o-1")
    assert state.followed_up_at == START + timedelta(days=2)
    assert state.last_call_at == START + timedelta(days=4)
    saga = harness.get_saga(OfferFlow, "o-1")
    assert saga is not None
    assert saga.completed_at == START + timedelta(days=4)


def test_advance_time_returns_how_many_timers_stopped_being_due(harness: SagaHarness) -> None:
    harness.publish(QuoteSent("q-1"))
    harness.publish(OfferSent("o-1"))

    assert harness.advance_time(timedelta(days=1)) == 0
    # quote followup + callback, offer followup + last call
    assert harness.advance_time(timedelta(days=4)) == 4
    assert harness.advance_time(timedelta(days=30)) == 0


def test_advance_time_stops_short_of_timers_due_after_the_target(harness: SagaHarness) -> None:
    harness.publish(QuoteSent("q-1"))

    assert harness.advance_time(timedelta(days=2, hours=23)) == 1

    assert [(row.name, row.outcome) for row in harness.timeouts(QuoteFlow, "q-1")] == [
        ("followup", TimeoutOutcome.FIRED),
        ("callback", None),
    ]


def test_drain_timeouts_fires_what_is_due_now_without_moving_the_clock(
    harness: SagaHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(PROBE_ACTIONS, "due-now", schedule_probe_due("now", timedelta(0)))
    harness.publish(ProbeStarted("p-1", "due-now"))

    assert harness.drain_timeouts() == 1
    assert harness.drain_timeouts() == 0
    assert timezone.now() == START


def test_drain_timeouts_counts_a_timer_that_woke_its_own_saga(harness: SagaHarness) -> None:
    harness.publish(TaskOpened("t-1", nudge_after_seconds=0))

    assert harness.drain_timeouts() == 1
    assert harness.state(TaskFlow, "t-1").nudged == 1


def test_a_timer_whose_receiver_keeps_failing_is_dead_lettered_within_advance_time(
    harness: SagaHarness,
) -> None:
    mailer = Recorder(QuoteFollowUpDue).connect()
    mailer.fail_with = RuntimeError("smtp down")
    try:
        harness.publish(QuoteSent("q-1"))
        with override_settings(BSFT_SAGA={"DELIVERY": {"MAX_DISPATCH_ATTEMPTS": 3}}):
            settled = harness.advance_time(timedelta(days=5))
    finally:
        mailer.disconnect()

    assert settled == 2
    assert [
        (row.name, row.outcome, row.attempts) for row in harness.timeouts(QuoteFlow, "q-1")
    ] == [
        ("followup", TimeoutOutcome.DEAD_LETTERED, 3),
        ("callback", TimeoutOutcome.FIRED, 0),
    ]


# --- inspecting -----------------------------------------------------------------------------


def test_state_is_the_decoded_state_dataclass(harness: SagaHarness) -> None:
    harness.publish(OfferSent("o-1"))
    harness.publish(OfferAccepted("o-1"))

    assert harness.state(OfferFlow, "o-1") == OfferState(accepted=True)


def test_state_of_a_key_without_instance_is_a_lookup_error(harness: SagaHarness) -> None:
    with pytest.raises(LookupError, match="o-404"):
        harness.state(OfferFlow, "o-404")


def test_get_saga_accepts_the_flow_class_or_its_saga_type(harness: SagaHarness) -> None:
    harness.publish(QuoteSent("q-1"))

    by_class = harness.get_saga(QuoteFlow, "q-1")
    assert by_class is not None
    assert harness.get_saga("tests.quote", "q-1") == by_class
    assert harness.get_saga(QuoteFlow, "q-2") is None


def test_get_saga_returns_the_new_instance_after_completion_and_restart(
    harness: SagaHarness,
) -> None:
    harness.publish(QuoteSent("q-1"))
    harness.publish(QuoteAccepted("q-1"))
    first = harness.get_saga(QuoteFlow, "q-1")
    harness.advance_time(timedelta(minutes=1))

    harness.publish(QuoteSent("q-1"))

    newest = harness.get_saga(QuoteFlow, "q-1")
    assert newest is not None
    assert first is not None
    assert newest.pk != first.pk
    assert not newest.is_complete


def test_get_saga_returns_the_newest_of_two_completed_instances(harness: SagaHarness) -> None:
    harness.publish(QuoteSent("q-1"))
    harness.publish(QuoteAccepted("q-1"))
    harness.advance_time(timedelta(minutes=1))
    harness.publish(QuoteSent("q-1"))
    harness.publish(QuoteWithdrawn("q-1"))

    newest = harness.get_saga(QuoteFlow, "q-1")

    assert SagaInstance.objects.filter(correlation_key="q-1").count() == 2
    assert newest is not None
    assert newest.state["withdrawn"] is True


def test_get_saga_returns_the_newest_instance_created_at_the_same_frozen_instant(
    harness: SagaHarness,
) -> None:
    for _ in range(3):
        harness.publish(QuoteSent("q-1"))
        harness.publish(QuoteAccepted("q-1"))
    harness.publish(QuoteSent("q-1"))
    harness.publish(QuoteWithdrawn("q-1"))

    newest = harness.get_saga(QuoteFlow, "q-1")

    assert newest is not None
    assert newest.state["withdrawn"] is True


def test_timeouts_lists_the_newest_instances_timers_oldest_due_first(
    harness: SagaHarness,
) -> None:
    harness.publish(QuoteSent("q-1"))
    harness.publish(QuoteAccepted("q-1"))
    harness.publish(QuoteSent("q-1"))  # a new instance with its own reminders

    rows = harness.timeouts(QuoteFlow, "q-1")

    assert [(row.name, row.outcome) for row in rows] == [("followup", None), ("callback", None)]


def test_timeouts_is_a_queryset_a_test_can_filter(harness: SagaHarness) -> None:
    harness.publish(QuoteSent("q-1"))

    harness.advance_time(timedelta(days=3))

    assert harness.timeouts(QuoteFlow, "q-1").filter(outcome="fired").count() == 2


def test_publish_returns_the_envelope_it_published(harness: SagaHarness) -> None:
    envelope = harness.publish(QuoteSent("q-1"), correlation_id="test-1")

    assert (envelope.event, envelope.correlation_id, envelope.published_at) == (
        QuoteSent("q-1"),
        "test-1",
        START,
    )


def test_timeouts_of_a_key_without_instance_is_empty(harness: SagaHarness) -> None:
    assert not harness.timeouts(QuoteFlow, "q-404").exists()
