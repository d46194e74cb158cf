"""The step context: what a body sees, and the effects it asks for.

Nothing a body asks for happens while it runs. Publishing, timers and completion are
collected here and written by the persistence window after the last body returned, so
a body that raises leaves nothing behind.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from bsft_saga.calendars import get_calendar
from bsft_saga.events import payloads
from bsft_saga.events.envelope import Envelope
from bsft_saga.events.registry import event_type_of
from bsft_saga.timeouts.requests import (
    RESERVED_PREFIX,
    CancelAllTimers,
    CancelTimer,
    TimeoutScopeName,
    TimerOperation,
    TimerRequest,
)

S = TypeVar("S")


@dataclass(frozen=True)
class StagedEvent:
    """An event a step published, with the payload it was validated (encoded) as."""

    envelope: Envelope
    payload: dict[str, Any]


@dataclass
class StepEffects:
    """Everything the bodies of one step asked for, in order."""

    timer_operations: list[TimerOperation] = field(default_factory=list)
    outbox: list[StagedEvent] = field(default_factory=list)
    completed: bool = False


class SagaContext(Generic[S]):
    """Passed to every step body as ``ctx``."""

    def __init__(
        self,
        *,
        state: S,
        saga_id: uuid.UUID,
        saga_type: str,
        correlation_key: str | None,
        envelope: Envelope,
        now: datetime,
        deadline: datetime | None,
    ) -> None:
        self.state = state
        self.saga_id = saga_id
        self.saga_type = saga_type
        self.correlation_key = correlation_key
        self.envelope = envelope
        self.now = now
        self.deadline = deadline
        self.effects = StepEffects()

    def publish(self, event: Any, *, ignore_deadline: bool = False) -> Envelope:
        """Stage ``event``; it is published after this step commits, at least once.

        It carries this step's correlation id and, unless ``ignore_deadline`` (for
        compensation, which must run late too), the saga's deadline.
        """
        event_type = event_type_of(event)
        payload = payloads.encode_event(event, event_type)  # what cannot be stored fails here
        deadline = None if ignore_deadline else (self.deadline or self.envelope.deadline)
        envelope = Envelope(
            message_id=uuid.uuid4(),
            event=event,
            event_type=event_type,
            correlation_id=self.envelope.correlation_id,
            causation_id=self.envelope.message_id,
            deadline=deadline,
            published_at=self.now,
        )
        self.effects.outbox.append(StagedEvent(envelope, payload))
        return envelope

    def mark_complete(self) -> None:
        """Complete the saga when this step commits; its pending timers are cancelled."""
        self.effects.completed = True

    def schedule_timeout(
        self,
        name: str,
        when: timedelta | datetime,
        event: Any,
        *,
        calendar: str | None = None,
        scope: TimeoutScopeName = "step",
    ) -> None:
        """Schedule a named timer that publishes ``event`` when due.

        ``when`` is a delay (counted in business days of ``calendar`` when given) or an
        aware datetime. A pending timer with the same name is replaced. ``scope="step"``
        timers are cancelled when the saga handles its next awaited event;
        ``scope="saga"`` timers live until they fire or the saga completes.
        """
        if not isinstance(name, str) or not name or len(name) > 200:
            raise ValueError(
                f"schedule_timeout: name must be a non-empty str of <= 200 chars, got {name!r}"
            )
        if name.startswith(RESERVED_PREFIX):
            raise ValueError(
                f"schedule_timeout({name!r}): names starting with {RESERVED_PREFIX!r} are "
                "reserved for bsft_saga's own timers"
            )
        if scope not in ("step", "saga"):
            raise ValueError(
                f"schedule_timeout({name!r}): scope must be 'step' or 'saga', not {scope!r}"
            )
        due_at = self._due_at(name, when, calendar)
        event_type = event_type_of(event)
        self.effects.timer_operations.append(
            TimerRequest(
                name=name,
                due_at=due_at,
                event_type=event_type,
                payload=payloads.encode_event(event, event_type),
                calendar_key=calendar or "",
                scope=scope,
            )
        )

    def _due_at(self, name: str, when: timedelta | datetime, calendar: str | None) -> datetime:
        if isinstance(when, datetime):
            if when.tzinfo is None or when.utcoffset() is None:
                raise ValueError(
                    f"schedule_timeout({name!r}): a naive datetime is ambiguous; pass an aware one"
                )
            if calendar is not None:
                raise ValueError(
                    f"schedule_timeout({name!r}): calendar applies to a delay (timedelta), "
                    "not to an absolute datetime"
                )
            return when
        if isinstance(when, timedelta):
            if when < timedelta(0):
                raise ValueError(f"schedule_timeout({name!r}): the delay {when} is negative")
            if calendar is None:
                return self.now + when
            return get_calendar(calendar).add(self.now, when)
        raise TypeError(
            f"schedule_timeout({name!r}): when must be a timedelta or an aware datetime, "
            f"got {type(when).__name__}"
        )

    def cancel_timeout(self, name: str) -> None:
        """Cancel the pending timer ``name`` when this step commits (no error if none)."""
        if name.startswith(RESERVED_PREFIX):
            raise ValueError(
                f"cancel_timeout({name!r}): timers named {RESERVED_PREFIX!r}... belong to "
                "bsft_saga (a with_deadline deadline ends with the saga or at on_expired)"
            )
        self.effects.timer_operations.append(CancelTimer(name))

    def cancel_all_timeouts(self) -> None:
        """Cancel every pending timer this saga scheduled, when this step commits.

        bsft_saga's own timers (the ``with_deadline`` timer) are kept.
        """
        self.effects.timer_operations.append(CancelAllTimers())
