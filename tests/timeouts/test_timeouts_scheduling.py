"""Scheduling and canceling durable named timers from saga steps, in plain durations and in
business days.

Every timer here is written or canceled by the engine's persistence window, in the same
commit as the step that asked for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.db import IntegrityError, transaction
from freezegun import freeze_time
from freezegun.api import FrozenDateTimeFactory

from bsft_saga import publish
from bsft_saga.calendars import UnknownCalendar
from bsft_saga.models import SagaInboxEntry, SagaTimeout, TimeoutOutcome
from bsft_saga.timeouts import drain_due
from tests.support.timer_fixtures import T0, Action
from tests.testapp.events import QuoteAccepted, QuoteSent, TaskClosed, TaskOpened
from tests.testapp.timer_events import OneShotRequested, ProbeDue, ProbePoked, ProbeStarted
from tests.testapp.timer_flows import (
    OneShotFlow,
    ProbeFlow,
    QuoteFlow,
    TaskFlow,
    saga_of,
    the_saga,
    timers_of,
)
from tests.testapp.timer_flows import (
    schedule_probe_due as schedule,
)

pytestmark = pytest.mark.django_db


def pending(flow: type, key: str) -> list[SagaTimeout]:
    return [row for row in timers_of(flow, key) if row.is_pending]


# --- what a scheduled timer is ---------------------------------------------------------


def test_a_timedelta_is_a_delay_from_the_steps_now(clock: Any, action: Any) -> None:
    publish(ProbeStarted("p-1", action(schedule("remind", timedelta(hours=2), label="x"))))

    [row] = timers_of(ProbeFlow, "p-1")
    assert row.name == "remind"
    assert row.due_at == T0 + timedelta(hours=2)
    assert row.scheduled_at == T0
    assert row.event_type == "tests.timers.probe-due"
    assert row.payload == {"probe_id": "p-1", "label": "x"}
    assert (row.calendar_key, row.scope) == ("", "step")
    assert (row.dispatched_at, row.outcome, row.attempts) == (None, None, 0)


def test_an_aware_datetime_is_the_due_instant_itself(clock: Any, action: Any) -> None:
    at = datetime(2026, 3, 5, 17, 30, tzinfo=ZoneInfo("Europe/Berlin"))

    publish(ProbeStarted("p-1", action(schedule("remind", at))))

    [row] = timers_of(ProbeFlow, "p-1")
    assert row.due_at == datetime(2026, 3, 5, 16, 30, tzinfo=UTC)


def test_a_naive_datetime_is_a_value_error_and_nothing_is_written(clock: Any, action: Any) -> None:
    with pytest.raises(ValueError, match="naive"):
        publish(ProbeStarted("p-1", action(schedule("remind", datetime(2026, 3, 5, 17, 30)))))

    assert saga_of(ProbeFlow, "p-1") is None
    assert not SagaTimeout.objects.exists()


def test_a_calendar_with_an_absolute_datetime_is_a_value_error(clock: Any, action: Any) -> None:
    at = T0 + timedelta(days=2)

    with pytest.raises(ValueError, match="calendar"):
        publish(ProbeStarted("p-1", action(schedule("remind", at, calendar="berlin"))))

    assert not SagaTimeout.objects.exists()


def test_an_unknown_calendar_is_an_error_naming_the_key(clock: Any) -> None:
    with pytest.raises(UnknownCalendar, match="'mars'"):
        publish(TaskOpened("t-1", nudge_after_seconds=60, calendar="mars"))

    assert saga_of(TaskFlow, "t-1") is None


def test_a_negative_delay_is_a_value_error(clock: Any, action: Any) -> None:
    with pytest.raises(ValueError, match="negative"):
        publish(ProbeStarted("p-1", action(schedule("remind", timedelta(seconds=-1)))))


@pytest.mark.parametrize("scope", ["wait", "SAGA", ""])
def test_a_scope_other_than_step_or_saga_is_a_value_error(
    clock: Any, action: Any, scope: str
) -> None:
    with pytest.raises(ValueError, match="scope"):
        publish(ProbeStarted("p-1", action(schedule("remind", timedelta(hours=1), scope=scope))))

    assert not SagaTimeout.objects.exists()


def test_an_empty_name_is_a_value_error(clock: Any, action: Any) -> None:
    with pytest.raises(ValueError, match="name"):
        publish(ProbeStarted("p-1", action(schedule("", timedelta(hours=1)))))


def test_names_under_the_bsft_saga_prefix_are_reserved(clock: Any, action: Any) -> None:
    with pytest.raises(ValueError, match="reserved"):
        publish(ProbeStarted("p-1", action(schedule("bsft_saga.deadline", timedelta(hours=1)))))

    assert not SagaTimeout.objects.exists()


def test_canceling_a_timer_under_the_bsft_saga_prefix_is_a_value_error(
    clock: Any, action: Any
) -> None:
    def cancel_deadline(ctx: Any, e: Any) -> None:
        ctx.cancel_timeout("bsft_saga.deadline")

    with pytest.raises(ValueError, match="belong to bsft_saga"):
        publish(ProbeStarted("p-1", action(cancel_deadline)))


def test_an_event_the_codec_cannot_store_is_a_type_error_when_scheduling(
    clock: Any, action: Any
) -> None:
    def bad_payload(ctx: Any, e: Any) -> None:
        ctx.schedule_timeout("remind", timedelta(hours=1), ProbeDue(123))  # type: ignore[arg-type]

    with pytest.raises(TypeError, match="probe_id"):
        publish(ProbeStarted("p-1", action(bad_payload)))

    assert not SagaTimeout.objects.exists()


def test_a_timer_event_must_be_a_registered_event(clock: Any, action: Any) -> None:
    @dataclass(frozen=True)
    class NotAnEvent:
        probe_id: str

    def unregistered(ctx: Any, e: Any) -> None:
        ctx.schedule_timeout("remind", timedelta(hours=1), NotAnEvent(e.probe_id))

    with pytest.raises(TypeError, match="@event"):
        publish(ProbeStarted("p-1", action(unregistered)))


# --- written only with the step, in the same commit -------------------------------------


class StepBroke(RuntimeError):
    pass


def _then_raise(body: Action) -> Action:
    def run(ctx: Any, e: Any) -> None:
        body(ctx, e)
        raise StepBroke("after scheduling")

    return run


def test_a_start_step_that_raises_after_scheduling_leaves_neither_saga_nor_timer(
    clock: Any, action: Any
) -> None:
    with pytest.raises(StepBroke):
        publish(ProbeStarted("p-1", action(_then_raise(schedule("remind", timedelta(hours=1))))))

    assert saga_of(ProbeFlow, "p-1") is None
    assert not SagaTimeout.objects.exists()


def test_a_later_step_that_raises_after_scheduling_leaves_state_and_timers_unchanged(
    clock: Any, action: Any
) -> None:
    publish(ProbeStarted("p-1", action(schedule("first", timedelta(hours=1)))))
    before = the_saga(ProbeFlow, "p-1")

    with pytest.raises(StepBroke):
        publish(ProbePoked("p-1", action(_then_raise(schedule("second", timedelta(hours=2))))))

    after = the_saga(ProbeFlow, "p-1")
    assert (after.version, after.step_index, after.state) == (
        before.version,
        before.step_index,
        before.state,
    )
    assert [(row.name, row.outcome) for row in timers_of(ProbeFlow, "p-1")] == [("first", None)]


class TimerWriteFailed(Exception):
    pass


def failing_schedule(*args: Any, **kwargs: Any) -> None:
    raise TimerWriteFailed("the timer insert failed")


def test_a_failing_timer_write_takes_the_state_advance_down_with_it(
    clock: Any, action: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    publish(ProbeStarted("p-1"))
    before = the_saga(ProbeFlow, "p-1")

    # Fault injection: the window's timer write fails after the state UPDATE succeeded.
    monkeypatch.setattr("bsft_saga.timeouts.store.schedule", failing_schedule)
    poke = ProbePoked("p-1", action(schedule("remind", timedelta(hours=1))))
    with pytest.raises(TimerWriteFailed):
        publish(poke, message_id="00000000-0000-4000-8000-000000000001")

    after = the_saga(ProbeFlow, "p-1")
    assert (after.version, after.step_index, after.state) == (
        before.version,
        before.step_index,
        before.state,
    )
    assert not SagaInboxEntry.objects.filter(
        message_id="00000000-0000-4000-8000-000000000001"
    ).exists()
    assert not SagaTimeout.objects.exists()


def test_an_event_whose_timer_write_failed_can_be_retried_against_unchanged_state(
    clock: Any, action: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    publish(ProbeStarted("p-1"))
    poke = ProbePoked("p-1", action(schedule("remind", timedelta(hours=1))))
    message_id = "00000000-0000-4000-8000-000000000002"
    with monkeypatch.context() as patch:
        patch.setattr("bsft_saga.timeouts.store.schedule", failing_schedule)
        with pytest.raises(TimerWriteFailed):
            publish(poke, message_id=message_id)

    publish(poke, message_id=message_id)

    instance = the_saga(ProbeFlow, "p-1")
    assert instance.step_index == 2
    assert [row.name for row in pending(ProbeFlow, "p-1")] == ["remind"]


def test_a_step_that_schedules_and_marks_the_saga_complete_writes_no_timer(
    clock: Any, action: Any
) -> None:
    def schedule_then_complete(ctx: Any, e: Any) -> None:
        ctx.schedule_timeout("remind", timedelta(hours=1), ProbeDue(e.probe_id))
        ctx.mark_complete()

    publish(ProbeStarted("p-1"))
    publish(ProbePoked("p-1", action(schedule_then_complete)))

    instance = the_saga(ProbeFlow, "p-1")
    assert instance.is_complete
    assert not SagaTimeout.objects.exists()


def test_a_last_step_of_an_auto_completing_flow_writes_no_timer(clock: Any) -> None:
    publish(OneShotRequested("j-1"))

    instance = the_saga(OneShotFlow, "j-1")
    assert instance.is_complete
    assert not SagaTimeout.objects.exists()


# --- replace by name --------------------------------------------------------------------


def test_scheduling_a_name_twice_in_one_step_keeps_the_second(clock: Any, action: Any) -> None:
    def twice(ctx: Any, e: Any) -> None:
        ctx.schedule_timeout("remind", timedelta(hours=1), ProbeDue(e.probe_id, "first"))
        ctx.schedule_timeout("remind", timedelta(hours=5), ProbeDue(e.probe_id, "second"))

    publish(ProbeStarted("p-1", action(twice)))

    [row] = timers_of(ProbeFlow, "p-1")
    assert row.due_at == T0 + timedelta(hours=5)
    assert row.payload["label"] == "second"


def test_scheduling_a_pending_name_from_a_later_step_replaces_it_in_place(
    clock: FrozenDateTimeFactory, action: Any
) -> None:
    publish(
        ProbeStarted(
            "p-1", action(schedule("remind", timedelta(days=1), label="old", scope="saga"))
        )
    )
    [old] = timers_of(ProbeFlow, "p-1")
    clock.tick(timedelta(hours=3))

    publish(
        ProbePoked("p-1", action(schedule("remind", timedelta(days=2), label="new", scope="saga")))
    )

    [row] = timers_of(ProbeFlow, "p-1")
    assert row.pk == old.pk
    assert row.is_pending
    assert row.due_at == T0 + timedelta(hours=3, days=2)
    assert row.scheduled_at == T0 + timedelta(hours=3)
    assert row.payload["label"] == "new"
    assert row.message_id != old.message_id  # a replaced timer publishes a new message


def test_rescheduling_a_step_scoped_name_in_the_next_step_leaves_one_pending_timer(
    clock: Any, action: Any
) -> None:
    publish(ProbeStarted("p-1", action(schedule("remind", timedelta(days=1), label="old"))))

    publish(ProbePoked("p-1", action(schedule("remind", timedelta(days=2), label="new"))))

    [row] = pending(ProbeFlow, "p-1")
    assert (row.name, row.payload["label"], row.due_at) == (
        "remind",
        "new",
        T0 + timedelta(days=2),
    )


def test_the_database_refuses_a_second_pending_timer_with_the_same_name(
    clock: Any, action: Any
) -> None:
    publish(ProbeStarted("p-1", action(schedule("remind", timedelta(hours=1)))))
    [row] = timers_of(ProbeFlow, "p-1")

    with pytest.raises(IntegrityError), transaction.atomic():
        SagaTimeout.objects.create(
            saga=row.saga,
            name="remind",
            due_at=T0,
            event_type=row.event_type,
            payload=row.payload,
            scheduled_step_index=0,
            scheduled_at=T0,
        )


def test_the_database_allows_a_retired_timer_with_a_pending_ones_name(
    clock: Any, action: Any
) -> None:
    publish(ProbeStarted("p-1", action(schedule("remind", timedelta(hours=1)))))
    [row] = timers_of(ProbeFlow, "p-1")

    SagaTimeout.objects.create(
        saga=row.saga,
        name="remind",
        due_at=T0,
        event_type=row.event_type,
        payload=row.payload,
        scheduled_step_index=0,
        scheduled_at=T0,
        dispatched_at=T0,
        outcome=TimeoutOutcome.FIRED,
    )

    assert SagaTimeout.objects.filter(saga=row.saga, name="remind").count() == 2


def test_a_fired_timers_name_is_free_again(
    clock: FrozenDateTimeFactory, action: Any, record: Any
) -> None:
    record(ProbeDue)
    publish(ProbeStarted("p-1", action(schedule("remind", timedelta(hours=1), scope="saga"))))
    clock.tick(timedelta(hours=1))
    assert drain_due().fired == 1

    publish(ProbePoked("p-1", action(schedule("remind", timedelta(hours=1), scope="saga"))))

    rows = timers_of(ProbeFlow, "p-1")
    assert [(row.name, row.outcome) for row in rows] == [
        ("remind", TimeoutOutcome.FIRED),
        ("remind", None),
    ]
    assert rows[1].due_at == T0 + timedelta(hours=2)


def test_several_timers_can_be_pending_at_once(clock: Any) -> None:
    publish(QuoteSent("q-1"))

    assert [(row.name, row.due_at) for row in pending(QuoteFlow, "q-1")] == [
        ("followup", T0 + timedelta(days=2)),
        ("callback", T0 + timedelta(days=3)),
    ]


# --- canceling -------------------------------------------------------------------------


def test_accepting_the_quote_cancels_both_reminders(clock: FrozenDateTimeFactory) -> None:
    publish(QuoteSent("q-1"))
    clock.tick(timedelta(days=1))

    publish(QuoteAccepted("q-1"))

    rows = timers_of(QuoteFlow, "q-1")
    assert [(row.name, row.outcome) for row in rows] == [
        ("followup", TimeoutOutcome.CANCELED),
        ("callback", TimeoutOutcome.CANCELED),
    ]
    assert {row.dispatched_at for row in rows} == {T0 + timedelta(days=1)}


def test_reminders_of_an_accepted_quote_never_fire(
    clock: FrozenDateTimeFactory, record: Any
) -> None:
    from tests.testapp.events import QuoteCallbackDue, QuoteFollowUpDue

    reminders = record(QuoteFollowUpDue, QuoteCallbackDue)
    publish(QuoteSent("q-1"))
    clock.tick(timedelta(days=1))
    publish(QuoteAccepted("q-1"))

    clock.tick(timedelta(days=30))
    report = drain_due()

    assert (report.fired, report.unclaimed) == (0, 0)
    assert reminders.envelopes == []


def test_the_end_of_a_wait_cancels_only_its_step_scoped_timers(
    clock: FrozenDateTimeFactory, action: Any
) -> None:
    def both(ctx: Any, e: Any) -> None:
        schedule("step-timer", timedelta(days=1))(ctx, e)
        schedule("saga-timer", timedelta(days=1), scope="saga")(ctx, e)

    publish(ProbeStarted("p-1", action(both)))
    clock.tick(timedelta(hours=1))

    publish(ProbePoked("p-1"))

    outcomes = {row.name: (row.outcome, row.dispatched_at) for row in timers_of(ProbeFlow, "p-1")}
    assert outcomes == {
        "step-timer": (TimeoutOutcome.CANCELED, T0 + timedelta(hours=1)),
        "saga-timer": (None, None),
    }


def test_an_event_the_step_does_not_await_cancels_nothing(
    clock: FrozenDateTimeFactory, action: Any
) -> None:
    publish(ProbeStarted("p-1", action(schedule("step-timer", timedelta(days=1)))))

    publish(ProbeStarted("p-1"))  # a second start event for an active key is ignored

    [row] = timers_of(ProbeFlow, "p-1")
    assert row.is_pending


def test_a_saga_scoped_timer_survives_the_wait_it_was_scheduled_in(
    clock: FrozenDateTimeFactory,
) -> None:
    publish(TaskOpened("t-1", nudge_after_seconds=3600))
    clock.tick(timedelta(hours=1))

    drain_due()  # the nudge wakes step 1: the wait for NudgeDue ends

    outcomes = {row.name: row.outcome for row in timers_of(TaskFlow, "t-1")}
    assert outcomes == {"nudge": TimeoutOutcome.FIRED, "escalate": None}


def test_completing_the_saga_cancels_all_its_pending_timers(
    clock: FrozenDateTimeFactory,
) -> None:
    publish(TaskOpened("t-1", nudge_after_seconds=3600))
    clock.tick(timedelta(hours=1))
    drain_due()
    clock.tick(timedelta(hours=1))

    publish(TaskClosed("t-1"))

    escalate = next(row for row in timers_of(TaskFlow, "t-1") if row.name == "escalate")
    assert (escalate.outcome, escalate.dispatched_at) == (
        TimeoutOutcome.CANCELED,
        T0 + timedelta(hours=2),
    )


def test_cancel_timeout_cancels_the_named_pending_timer_only(
    clock: FrozenDateTimeFactory, action: Any
) -> None:
    def two(ctx: Any, e: Any) -> None:
        schedule("a", timedelta(days=1), scope="saga")(ctx, e)
        schedule("b", timedelta(days=1), scope="saga")(ctx, e)

    publish(ProbeStarted("p-1", action(two)))

    publish(ProbePoked("p-1", action(lambda ctx, e: ctx.cancel_timeout("a"))))

    outcomes = {row.name: row.outcome for row in timers_of(ProbeFlow, "p-1")}
    assert outcomes == {"a": TimeoutOutcome.CANCELED, "b": None}


def test_canceling_a_name_that_is_not_pending_is_no_error(clock: Any, action: Any) -> None:
    publish(ProbeStarted("p-1"))

    publish(ProbePoked("p-1", action(lambda ctx, e: ctx.cancel_timeout("never-scheduled"))))

    instance = the_saga(ProbeFlow, "p-1")
    assert instance.step_index == 2


def test_cancel_all_timeouts_cancels_every_pending_timer(clock: Any, action: Any) -> None:
    def two(ctx: Any, e: Any) -> None:
        schedule("a", timedelta(days=1), scope="saga")(ctx, e)
        schedule("b", timedelta(days=2), scope="saga")(ctx, e)

    publish(ProbeStarted("p-1", action(two)))

    publish(ProbePoked("p-1", action(lambda ctx, e: ctx.cancel_all_timeouts())))

    assert {row.outcome for row in timers_of(ProbeFlow, "p-1")} == {TimeoutOutcome.CANCELED}
    instance = the_saga(ProbeFlow, "p-1")
    assert not instance.is_complete


def test_timer_operations_of_a_step_apply_in_the_order_they_were_asked_for(
    clock: Any, action: Any
) -> None:
    publish(ProbeStarted("p-1", action(schedule("a", timedelta(days=1), scope="saga"))))

    def cancel_then_schedule(ctx: Any, e: Any) -> None:
        ctx.cancel_all_timeouts()
        schedule("b", timedelta(days=1), scope="saga")(ctx, e)

    publish(ProbePoked("p-1", action(cancel_then_schedule)))

    outcomes = {row.name: row.outcome for row in timers_of(ProbeFlow, "p-1")}
    assert outcomes == {"a": TimeoutOutcome.CANCELED, "b": None}


def test_a_step_that_raises_after_canceling_cancels_nothing(clock: Any, action: Any) -> None:
    publish(ProbeStarted("p-1", action(schedule("a", timedelta(days=1), scope="saga"))))

    with pytest.raises(StepBroke):
        publish(ProbePoked("p-1", action(_then_raise(lambda ctx, e: ctx.cancel_all_timeouts()))))

    [row] = timers_of(ProbeFlow, "p-1")
    assert row.is_pending


# --- business calendars -------------------------------------------------------------------

FRIDAY_BEFORE_DST = datetime(2026, 3, 27, 10, 0, tzinfo=UTC)


def test_a_calendar_delay_is_counted_in_business_days_and_the_key_is_stored() -> None:
    with freeze_time(FRIDAY_BEFORE_DST):
        publish(TaskOpened("t-1", nudge_after_seconds=2 * 86400, calendar="berlin"))

    nudge = next(row for row in timers_of(TaskFlow, "t-1") if row.name == "nudge")
    # Friday 11:00 Berlin + 2 business days = Tuesday 11:00 Berlin, 09:00 UTC after DST began.
    assert nudge.due_at == datetime(2026, 3, 31, 9, 0, tzinfo=UTC)
    assert nudge.calendar_key == "berlin"


def test_a_timer_without_calendar_stores_no_calendar_key(clock: Any) -> None:
    publish(TaskOpened("t-1", nudge_after_seconds=2 * 86400))

    nudge = next(row for row in timers_of(TaskFlow, "t-1") if row.name == "nudge")
    assert (nudge.due_at, nudge.calendar_key) == (T0 + timedelta(days=2), "")


def test_a_business_day_timer_fires_at_its_business_due_time_not_before() -> None:
    with freeze_time(FRIDAY_BEFORE_DST) as frozen:
        publish(TaskOpened("t-1", nudge_after_seconds=2 * 86400, calendar="berlin"))

        frozen.move_to(datetime(2026, 3, 31, 8, 59, tzinfo=UTC))
        assert drain_due().fired == 0
        frozen.move_to(datetime(2026, 3, 31, 9, 0, tzinfo=UTC))
        assert drain_due().fired == 1

    instance = the_saga(TaskFlow, "t-1")
    assert instance.state["nudged"] == 1
