"""How deeply synchronous deliveries are nested in this call stack, and the limit on it.

Two things nest one delivery in another: ``send_envelope`` (``publish()`` from a body sends
its event at once, to receivers that may publish again) and the delivery of the outbox rows
a window staged, right after it commits and before the code that caused the commit returns
(a step's ``ctx.publish``). A loop of either (a step whose event reaches its own saga again)
would recurse until Python's ``RecursionError``, committing a window at every level; the
engine checks :func:`check` before a step's bodies run instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from bsft_saga.conf import saga_settings
from bsft_saga.exceptions import PublishDepthExceeded

_depth: ContextVar[int] = ContextVar("bsft_saga_delivery_depth", default=0)


@contextmanager
def nested() -> Iterator[None]:
    """One more synchronous delivery in progress while the block runs."""
    token = _depth.set(_depth.get() + 1)
    try:
        yield
    finally:
        _depth.reset(token)


def depth() -> int:
    """How many synchronous deliveries are in progress in this call stack (0: none)."""
    return _depth.get()


def check(where: str, event_type: str) -> None:
    """Raise ``PublishDepthExceeded`` if the delivery of ``event_type`` to the step ``where``
    names is nested deeper than ``BSFT_SAGA["ENGINE"]["MAX_PUBLISH_DEPTH"]``."""
    current = _depth.get()
    limit = saga_settings.engine.max_publish_depth
    if current > limit:
        raise PublishDepthExceeded(where, event_type, current, limit)
