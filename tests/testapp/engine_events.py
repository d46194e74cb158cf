"""Events of the engine tests' probe flows (see tests/testapp/flows.py)."""

from __future__ import annotations

from dataclasses import dataclass

from bsft_saga import event


@event("tests.engine.probe-started")
@dataclass(frozen=True)
class ProbeStarted:
    probe_id: str


@event("tests.engine.probe-next")
@dataclass(frozen=True)
class ProbeNext:
    probe_id: str


@event("tests.engine.probe-echo")
@dataclass(frozen=True)
class ProbeEcho:
    """Published by the probe flows' steps; no flow awaits it."""

    probe_id: str
    kind: str


@event("tests.engine.deadline-probe-started")
@dataclass(frozen=True)
class DeadlineProbeStarted:
    probe_id: str


@event("tests.engine.deadline-probe-finished")
@dataclass(frozen=True)
class DeadlineProbeFinished:
    probe_id: str


@event("tests.engine.unrouted")
@dataclass(frozen=True)
class Unrouted:
    """An event no flow awaits: only plain receivers see it."""

    note: str = ""


@event("tests.engine.reminder-requested")
@dataclass(frozen=True)
class ReminderRequested:
    reminder_id: str


@event("tests.engine.reminder-due")
@dataclass(frozen=True)
class ReminderDue:
    """Published by ReminderFlow's own timer; wakes ReminderFlow's second step."""

    reminder_id: str
