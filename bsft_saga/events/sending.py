"""Putting an envelope on the ``event_published`` signal."""

from __future__ import annotations

import uuid
from contextvars import ContextVar

from bsft_saga.correlation import correlation_scope
from bsft_saga.events.envelope import Envelope
from bsft_saga.signals import event_published

# The message id whose send runs in a savepoint its sender rolls back on any exception.
_isolated: ContextVar[uuid.UUID | None] = ContextVar("bsft_saga_isolated_send", default=None)


def send_envelope(envelope: Envelope, *, isolated: bool = False) -> None:
    """Send ``envelope`` to every receiver, under its correlation id.

    ``Signal.send`` semantics: receivers run in connection order, synchronously, and the
    first exception propagates to the caller. ``isolated``: the caller runs this send inside
    a savepoint of its own and rolls it back on any exception (the delivery of a timer or an
    outbox row does), so a step handling this envelope need not open one of its own.
    """
    marker = _isolated.set(envelope.message_id if isolated else None)
    try:
        with correlation_scope(envelope.correlation_id):
            event_published.send(sender=type(envelope.event), envelope=envelope)
    finally:
        _isolated.reset(marker)


def sent_in_isolation(envelope: Envelope) -> bool:
    """Whether ``envelope`` is being sent inside a savepoint its sender rolls back on any
    exception (see ``send_envelope``); false for an event a receiver publishes meanwhile."""
    return _isolated.get() == envelope.message_id
