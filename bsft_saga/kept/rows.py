"""The envelope a kept row holds."""

from __future__ import annotations

from bsft_saga.events import codec
from bsft_saga.events.envelope import Envelope
from bsft_saga.events.registry import event_class, event_type_of
from bsft_saga.models import SagaKeptEvent


def envelope_of(row: SagaKeptEvent) -> Envelope:
    """Rebuild the envelope that was kept, with its own id, correlation id and deadline."""
    cls = event_class(row.event_type)
    return Envelope(
        message_id=row.message_id,
        event=codec.decode(cls, row.payload),
        event_type=event_type_of(cls),
        correlation_id=row.correlation_id or None,
        causation_id=row.causation_id,
        deadline=row.deadline,
        published_at=row.published_at or row.kept_at,
    )
