"""Durable sagas with named, exactly-once timers for Django.

The names in ``__all__`` are the public API. They are resolved lazily so that
``import bsft_saga`` never touches Django models (settings may not be configured yet).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "Envelope",
    "PublishDepthExceeded",
    "PublishOutcome",
    "Published",
    "SagaContext",
    "SagaFlow",
    "UnknownEventType",
    "UnknownFlowVersion",
    "__version__",
    "apublish",
    "apublish_many",
    "deadline_exceeded",
    "event",
    "publish",
    "publish_many",
]

_LAZY = {
    "Envelope": "bsft_saga.events.envelope",
    "event": "bsft_saga.events.registry",
    "publish": "bsft_saga.publishing",
    "apublish": "bsft_saga.publishing",
    "publish_many": "bsft_saga.publishing_many",
    "apublish_many": "bsft_saga.publishing_many",
    "Published": "bsft_saga.publishing_many",
    "PublishOutcome": "bsft_saga.publishing_many",
    "deadline_exceeded": "bsft_saga.events.envelope",
    "PublishDepthExceeded": "bsft_saga.exceptions",
    "UnknownEventType": "bsft_saga.exceptions",
    "UnknownFlowVersion": "bsft_saga.exceptions",
    "SagaFlow": "bsft_saga.flows",
    "SagaContext": "bsft_saga.engine.context",
}

if TYPE_CHECKING:
    from bsft_saga.engine.context import SagaContext
    from bsft_saga.events.envelope import Envelope, deadline_exceeded
    from bsft_saga.events.registry import event
    from bsft_saga.exceptions import PublishDepthExceeded, UnknownEventType, UnknownFlowVersion
    from bsft_saga.flows import SagaFlow
    from bsft_saga.publishing import apublish, publish
    from bsft_saga.publishing_many import (
        Published,
        PublishOutcome,
        apublish_many,
        publish_many,
    )


def __getattr__(name: str) -> Any:
    try:
        module = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'bsft_saga' has no attribute {name!r}") from None
    return getattr(import_module(module), name)
