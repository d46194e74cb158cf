"""The envelope every published event travels in."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bsft_saga import clock


@dataclass(frozen=True)
class TimerOrigin:
    """Marks an envelope as published by a firing timer.

    The engine uses it to stamp the timer as fired in the same commit as the step it
    wakes in its own saga; ``claim_token`` fences a dispatcher that lost its claim.
    ``due_at`` is when the timer was due and ``scheduled_at`` when its step scheduled it
    (both aware): ``clock.now() - due_at`` is how late the event is. An envelope that
    carries one never starts a saga.
    """

    timer_id: int
    saga_id: uuid.UUID
    name: str
    claim_token: uuid.UUID
    due_at: datetime
    scheduled_at: datetime


@dataclass(frozen=True)
class Envelope:
    """An event plus the metadata that travels with it."""

    message_id: uuid.UUID
    event: Any
    event_type: str
    correlation_id: str | None
    causation_id: uuid.UUID | None
    deadline: datetime | None
    published_at: datetime
    timer: TimerOrigin | None = None

    @property
    def deadline_exceeded(self) -> bool:
        return deadline_exceeded(self)


def deadline_exceeded(envelope: Envelope) -> bool:
    """Whether the envelope's absolute deadline has passed (``False`` without one).

    Receivers call it to refuse late forward work; compensation should ignore it.
    """
    return envelope.deadline is not None and clock.now() >= envelope.deadline
