"""The engine's receiver of ``event_published``."""

from __future__ import annotations

from typing import Any

from bsft_saga.events.envelope import Envelope
from bsft_saga.signals import event_published


def on_event_published(sender: type, *, envelope: Envelope, **kwargs: Any) -> None:
    from bsft_saga.engine.handler import handle

    handle(envelope)


def connect_engine() -> None:
    """Subscribe the engine to the event signal (idempotent)."""
    event_published.connect(on_event_published, dispatch_uid="bsft_saga.engine")
