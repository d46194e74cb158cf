"""The internal timer behind ``with_deadline``."""

from __future__ import annotations

from dataclasses import dataclass

from bsft_saga.events.registry import event
from bsft_saga.timeouts.requests import DEADLINE_TIMER_NAME

__all__ = ["DEADLINE_TIMER_NAME", "DeadlineExpired"]


@event("bsft_saga.deadline-expired")
@dataclass(frozen=True)
class DeadlineExpired:
    """Published when a saga's ``with_deadline`` budget runs out; wakes its ``on_expired``."""

    saga_id: str
    saga_type: str
