"""What a step can ask of its saga's timers; the window carries these out."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

TimerScopeName = Literal["step", "saga"]

# Timer names under this prefix belong to bsft_saga itself (e.g. the deadline timer).
RESERVED_PREFIX = "bsft_saga."
DEADLINE_TIMER_NAME = "bsft_saga.deadline"


@dataclass(frozen=True)
class TimerRequest:
    """A timer a step asked to schedule; ``ignore_deadline``: its event carries no deadline."""

    name: str
    due_at: datetime
    event_type: str
    payload: dict[str, Any]
    calendar_key: str
    scope: TimerScopeName
    ignore_deadline: bool = False


@dataclass(frozen=True)
class CancelTimer:
    name: str


@dataclass(frozen=True)
class CancelAllTimers:
    """Cancel the saga's own timers (not bsft_saga's internal ones, like its deadline)."""


TimerOperation = TimerRequest | CancelTimer | CancelAllTimers
