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
from bsft_saga.conf import saga_settings
from bsft_saga.db.datetimes import storable
from bsft_saga.events import payloads
from bsft_saga.events.envelope import Envelope
from bsft_saga.events.registry import check_publishable, event_type_of
from bsft_saga.publishing import delivery_time
from bsft_saga.timeouts.requests import (
    RESERVED_PREFIX,
    CancelAllTimers,
    CancelTimer,
    TimerOperation,
    TimerRequest,
    TimerScopeName,
)

S = TypeVar("S")


@dataclass(frozen=True)
class StagedEvent:
    """An event a step published, with the payload it was validated (encoded) as;
    ``deliver_at``: a delayed message's delivery time (``None``: after the commit)."""

    envelope: Envelope
    payload: dict[str, Any]
    deliver_at: datetime | None = None


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
        self._timers_asked = 0  # schedule_timeout() calls, against MAX_TIMERS_PER_STEP

    def publish(
        self,
        event: Any,
        *,
        ignore_deadline: bool = False,
        deliver_at: datetime | None = None,
        delay: timedelta | None = None,
    ) -> Envelope:
        """Stage ``event``; it is published after this step commits, at least once.

        It carries this step's correlation id and, unless ``ignore_deadline`` (for
        compensation, which must run late too), the saga's deadline. ``deliver_at`` (an
        aware datetime) or ``delay`` (from ``ctx.now``), not both, make it a delayed
        message: its outbox row commits with the step, and the drain delivers it once that
        time has come, never before. An event type of bsft_saga's own is a ``ValueError``,
        and so are a delivery time ``publish()`` would refuse and the event beyond
        ``BSFT_SAGA["ENGINE"]["MAX_EVENTS_PER_STEP"]`` (1,000 by default); the step then
        leaves nothing behind.
        """
        event_type = event_type_of(event)
        where = f"ctx.publish({event_type})"
        check_publishable(event_type, where)
        when = delivery_time(deliver_at, delay, now=self.now, where=where)
        limit = saga_settings.engine.max_events_per_step
        if len(self.effects.outbox) >= limit:
            raise ValueError(
                f"{where}: a step publishes at most {limit} events "
                "(BSFT_SAGA['ENGINE']['MAX_EVENTS_PER_STEP']); publish the rest from the "
                "steps they wake, or in batches"
            )
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
        self.effects.outbox.append(StagedEvent(envelope, payload, deliver_at=when))
        return envelope

    def mark_complete(self) -> None:
        """Complete the saga when this step commits; its pending timers are canceled."""
        self.effects.completed = True

    def schedule_timeout(
        self,
        name: str,
        when: timedelta | datetime,
        event: Any,
        *,
        calendar: str | None = None,
        scope: TimerScopeName = "step",
        ignore_deadline: bool = False,
    ) -> None:
        """Schedule a named timer that publishes ``event`` when due.

        ``when`` is a delay (counted in business days of ``calendar`` when given) or an
        aware datetime; the time it comes to must lie between 0001-01-02 and 9998-12-31 in
        UTC (``bsft_saga.db.datetimes``), or it is a ``ValueError``. A pending timer with the
        same name is replaced. ``scope="step"`` timers are canceled when the saga handles
        its next awaited event; ``scope="saga"`` timers live until they fire or the saga
        completes. When it fires, its event carries the saga's deadline (as it is then)
        unless ``ignore_deadline`` (compensation retried by a timer, which must run late
        too, as ``publish(..., ignore_deadline=True)``). A step may call this at most
        ``BSFT_SAGA["ENGINE"]["MAX_TIMERS_PER_STEP"]`` times (1,000 by default): the next
        call is a ``ValueError``, and the step leaves nothing behind.
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
        limit = saga_settings.engine.max_timers_per_step
        if self._timers_asked >= limit:
            raise ValueError(
                f"schedule_timeout({name!r}): a step schedules at most {limit} timers "
                "(BSFT_SAGA['ENGINE']['MAX_TIMERS_PER_STEP']); schedule the rest from the "
                "steps they wake, or one recurring timer"
            )
        due_at = self._due_at(name, when, calendar)
        event_type = event_type_of(event)
        check_publishable(event_type, f"schedule_timeout({name!r})")
        self.effects.timer_operations.append(
            TimerRequest(
                name=name,
                due_at=due_at,
                event_type=event_type,
                payload=payloads.encode_event(event, event_type),
                calendar_key=calendar or "",
                scope=scope,
                ignore_deadline=ignore_deadline,
            )
        )
        self._timers_asked += 1

    def _due_at(self, name: str, when: timedelta | datetime, calendar: str | None) -> datetime:
        where = f"schedule_timeout({name!r})"
        try:
            due_at = self._moment(name, when, calendar)
        except OverflowError:  # a delay that runs past year 9999
            raise ValueError(
                f"{where}: the delay {when} runs past the dates bsft_saga stores"
            ) from None
        return storable(due_at, field="due_at", where=where)

    def _moment(self, name: str, when: timedelta | datetime, calendar: str | None) -> datetime:
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
