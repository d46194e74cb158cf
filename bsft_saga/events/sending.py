"""Putting an envelope on the ``event_published`` signal."""

from __future__ import annotations

from bsft_saga.correlation import correlation_scope
from bsft_saga.events import nesting
from bsft_saga.events.envelope import Envelope
from bsft_saga.signals import event_published


def send_envelope(envelope: Envelope) -> None:
    """Send ``envelope`` to every receiver, under its correlation id.

    ``Signal.send`` semantics: receivers run in connection order, synchronously, and the
    first exception propagates to the caller. The receivers run one synchronous delivery
    deeper (:mod:`bsft_saga.events.nesting`).
    """
    with correlation_scope(envelope.correlation_id), nesting.nested():
        event_published.send(sender=type(envelope.event), envelope=envelope)
