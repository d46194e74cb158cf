"""Exceptions raised by bsft_saga."""

from __future__ import annotations


class SagaError(Exception):
    """Base class of bsft_saga's own errors."""


class UnknownEventType(SagaError, LookupError):
    """A stored event type name has no registered ``@event`` class.

    Raised when a timer or outbox row is read back after a release renamed or removed
    the event class. The dispatcher counts it as a failed attempt of that row.
    """

    def __init__(self, event_type: str) -> None:
        self.event_type = event_type
        super().__init__(
            f"Unknown event type {event_type!r}: no class is registered with "
            f"@event({event_type!r}). Was the event class renamed or its module not imported?"
        )


class EventTypeConflict(SagaError, ValueError):
    """Two different classes claim the same persisted event type name."""


class FlowDefinitionError(SagaError, ValueError):
    """A flow's ``configure()`` describes something the engine cannot run."""


class SagaConcurrencyError(SagaError):
    """An event kept losing the optimistic-concurrency race for one saga instance."""
