"""Events of the load, fault-injection and race tests (see tests/testapp/load_flows.py)."""

from __future__ import annotations

from dataclasses import dataclass

from bsft_saga import event


@event("tests.load.count-started")
@dataclass(frozen=True)
class CountStarted:
    counter_id: str
    wake_after_seconds: int = 0


@event("tests.load.count-wake")
@dataclass(frozen=True)
class CountWake:
    counter_id: str


@event("tests.load.reminder-started")
@dataclass(frozen=True)
class ReminderStarted:
    reminder_id: str


@event("tests.load.reminder-due")
@dataclass(frozen=True)
class ReminderDue:
    """Awaited by no saga: only plain receivers of the signal react to it."""

    reminder_id: str


@event("tests.load.reminder-done")
@dataclass(frozen=True)
class ReminderDone:
    reminder_id: str


@event("tests.load.race-opened")
@dataclass(frozen=True)
class RaceOpened:
    race_id: str


@event("tests.load.race-bump")
@dataclass(frozen=True)
class RaceBump:
    race_id: str
    by: str = ""


@event("tests.load.race-reminder-due")
@dataclass(frozen=True)
class RaceReminderDue:
    race_id: str


@event("tests.load.bench-reminder-requested")
@dataclass(frozen=True)
class BenchReminderRequested:
    request_id: str
    note: str = ""


@event("tests.load.bench-reminder-due")
@dataclass(frozen=True)
class BenchReminderDue:
    request_id: str


@event("tests.load.soak-started")
@dataclass(frozen=True)
class SoakStarted:
    """``make soak``'s start event: its reminder is due ``remind_after_ms`` later."""

    soak_id: str
    remind_after_ms: int


@event("tests.load.soak-reminder-due")
@dataclass(frozen=True)
class SoakReminderDue:
    soak_id: str
