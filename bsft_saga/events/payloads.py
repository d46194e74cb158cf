"""An event's stored payload: encoded once, and refused when it is too large to carry.

Every pass that claims a timer or an outbox row reads its payload back, and every saga
that takes the event decodes it: a multi-megabyte event is a cost on every one of them.
``BSFT_SAGA["MAX_PAYLOAD_BYTES"]`` (default 256 KiB, Temporal's warning threshold) bounds the
payload where it is encoded, before anything is written.
"""

from __future__ import annotations

import json
from typing import Any

from bsft_saga.conf import saga_settings
from bsft_saga.events import codec

__all__ = ["encode_event", "encoded_size"]


def encode_event(event: Any, event_type: str) -> dict[str, Any]:
    """``codec.encode(event)``, or a ``ValueError`` naming the event type, the payload's size
    and the limit when it is larger than ``MAX_PAYLOAD_BYTES``."""
    payload = codec.encode(event)
    limit = saga_settings.max_payload_bytes
    if limit is not None:
        size = encoded_size(payload)
        if size > limit:
            raise ValueError(
                f"{event_type}: the encoded event is {size} bytes, more than "
                f"BSFT_SAGA['MAX_PAYLOAD_BYTES'] = {limit}; store large data elsewhere and "
                "carry a reference to it"
            )
    return payload


def encoded_size(payload: dict[str, Any]) -> int:
    """The size of ``payload`` as compact UTF-8 JSON, in bytes (what the limit measures)."""
    return len(json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
