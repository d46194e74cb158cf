"""Events: the ``@event`` registry, the payload codec and the envelope."""

from bsft_saga.events.envelope import Envelope, TimerOrigin, deadline_exceeded
from bsft_saga.events.registry import event, event_class, event_type_of

__all__ = [
    "Envelope",
    "TimerOrigin",
    "deadline_exceeded",
    "event",
    "event_class",
    "event_type_of",
    "publish",
]


def __getattr__(name: str) -> object:
    # publish() writes outbox rows, so it lives above the models; import it on demand.
    if name == "publish":
        from bsft_saga.publishing import publish

        return publish
    raise AttributeError(f"module 'bsft_saga.events' has no attribute {name!r}")
