"""Flows of the load, fault-injection and race tests, and of ``make bench`` and ``make soak``
(bench/).

Every flow here is deliberately tiny: what these tests count is how often a step ran,
so each body does one observable thing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from bsft_saga import SagaFlow
from tests.testapp.load_events import (
    BenchReminderDue,
    BenchReminderRequested,
    CountStarted,
    CountWake,
    RaceBump,
    RaceOpened,
    RaceReminderDue,
    ReminderDone,
    ReminderDue,
    ReminderStarted,
    SoakReminderDue,
    SoakStarted,
)

WAKE_TIMER = "wake"
REMINDER_TIMER = "remind"
RACE_TIMER = "reminder"
BENCH_REMINDER_TIMER = "remind"
BENCH_REMINDER_DELAY = timedelta(hours=1)
SOAK_REMINDER_TIMER = "remind"


@dataclass
class CountState:
    count: int = 0


def _schedule_wake(ctx: Any, e: CountStarted) -> None:
    ctx.schedule_timeout(
        WAKE_TIMER, timedelta(seconds=e.wake_after_seconds), CountWake(e.counter_id)
    )


def _count(ctx: Any, e: CountWake) -> None:
    ctx.state.count += 1


class CountingFlow(SagaFlow):
    """The start step schedules a timer that wakes the next step, which counts.

    Not auto-completed: the instance stays active at step 2, so a redelivered wake-up is
    dropped by the step guard (and the inbox), not by "no active instance".
    """

    saga_type = "tests.load.counting"

    def configure(self, factory: Any) -> None:
        (
            factory.with_state(CountState)
            .start_with(CountStarted, key=lambda e: e.counter_id)
            .then(_schedule_wake)
            .wait_for(CountWake, key=lambda e: e.counter_id)
            .then(_count)
            .build()
        )


class ReminderFlow(SagaFlow):
    """Its timer's event is handled by no saga step, only by plain receivers.

    So the dispatcher's own stamp is the one that retires the timer.
    """

    saga_type = "tests.load.reminder"

    def configure(self, factory: Any) -> None:
        (
            factory.stateless()
            .start_with(ReminderStarted, key=lambda e: e.reminder_id)
            .then(
                lambda ctx, e: ctx.schedule_timeout(
                    REMINDER_TIMER, timedelta(0), ReminderDue(e.reminder_id)
                )
            )
            .wait_for(ReminderDone, key=lambda e: e.reminder_id)
            .complete()
        )


@dataclass
class RaceState:
    bumps: int = 0
    bumped_by: list[str] = field(default_factory=list)


def _reschedule(ctx: Any, e: RaceOpened | RaceBump) -> None:
    ctx.schedule_timeout(RACE_TIMER, timedelta(days=1), RaceReminderDue(e.race_id), scope="saga")
    if isinstance(e, RaceBump):
        ctx.state.bumps += 1
        ctx.state.bumped_by.append(e.by)


class RaceFlow(SagaFlow):
    """Every step (re)schedules the same saga-scoped timer name."""

    saga_type = "tests.load.race"

    def configure(self, factory: Any) -> None:
        (
            factory.with_state(RaceState)
            .start_with(RaceOpened, key=lambda e: e.race_id)
            .then(_reschedule)
            .wait_for(RaceBump, key=lambda e: e.race_id)
            .then(_reschedule)
            .wait_for(RaceBump, key=lambda e: e.race_id)
            .then(_reschedule)
            .build()
        )


@dataclass
class BenchReminderState:
    note: str = ""


def _note_and_remind(ctx: Any, e: BenchReminderRequested) -> None:
    ctx.state.note = e.note
    ctx.schedule_timeout(BENCH_REMINDER_TIMER, BENCH_REMINDER_DELAY, BenchReminderDue(e.request_id))


class BenchReminderFlow(SagaFlow):
    """The step benchmark's flow: its start step sets the state and schedules one reminder.

    So publishing a start event writes an instance, its inbox row and one timer row, the
    same three rows bench/baselines.py inserts by hand.
    """

    saga_type = "tests.load.bench-reminder"

    def configure(self, factory: Any) -> None:
        (
            factory.with_state(BenchReminderState)
            .start_with(BenchReminderRequested, key=lambda e: e.request_id)
            .then(_note_and_remind)
            .wait_for(BenchReminderDue, key=lambda e: e.request_id)
            .complete()
        )


def _remind_later(ctx: Any, e: SoakStarted) -> None:
    ctx.schedule_timeout(
        SOAK_REMINDER_TIMER, timedelta(milliseconds=e.remind_after_ms), SoakReminderDue(e.soak_id)
    )


class SoakReminderFlow(SagaFlow):
    """``make soak``'s flow: the start step schedules a reminder a few seconds ahead, and the
    step it wakes completes the saga.

    So every saga lives a few seconds and leaves only retired rows behind: under a steady
    rate the pending set stays the same size while the tables churn (an instance, two inbox
    rows and a timer written, the timer updated by its claim and its stamp, the instance by
    its completion), which is what the soak watches for drift.
    """

    saga_type = "tests.load.soak-reminder"

    def configure(self, factory: Any) -> None:
        (
            factory.stateless()
            .start_with(SoakStarted, key=lambda e: e.soak_id)
            .then(_remind_later)
            .wait_for(SoakReminderDue, key=lambda e: e.soak_id)
            .complete()
        )


FLOWS: list[type[SagaFlow]] = [
    CountingFlow,
    ReminderFlow,
    RaceFlow,
    BenchReminderFlow,
    SoakReminderFlow,
]
