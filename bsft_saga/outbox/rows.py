"""An outbox row and its envelope, each made from the other."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from bsft_saga.events import codec
from bsft_saga.events.envelope import Envelope
from bsft_saga.events.registry import event_class, event_type_of
from bsft_saga.models import SagaOutboxMessage


def row_values(
    envelope: Envelope,
    payload: dict[str, Any],
    *,
    saga_id: uuid.UUID | None = None,
    deliver_at: datetime | None = None,
    trace_context: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The outbox row for ``envelope``, whose event ``payload`` encodes (for ``sql.insert``);
    ``deliver_at``: a delayed message's delivery time; ``trace_context``: the W3C trace
    context of the code that publishes it (``telemetry.current_trace_context``)."""
    return {
        "id": envelope.message_id,
        "saga": saga_id,
        "event_type": envelope.event_type,
        "payload": payload,
        "correlation_id": envelope.correlation_id or "",
        "causation_id": envelope.causation_id,
        "deadline": envelope.deadline,
        "created_at": envelope.published_at,
        "deliver_at": deliver_at,
        "trace_context": None if trace_context is None else dict(trace_context),
    }


def envelope_of(row: SagaOutboxMessage) -> Envelope:
    """Rebuild the envelope a row publishes; ``UnknownEventType`` if its type is gone."""
    cls = event_class(row.event_type)
    event: object = codec.decode(cls, row.payload)
    return Envelope(
        message_id=row.pk,
        event=event,
        event_type=event_type_of(cls),  # the primary name, also for a row stored under an alias
        correlation_id=row.correlation_id or None,
        causation_id=row.causation_id,
        deadline=row.deadline,
        published_at=row.created_at,
    )
