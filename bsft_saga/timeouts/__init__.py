"""Durable named timers: the scheduling store, the dispatcher and catch-up policies."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["DrainReport", "drain_due"]

if TYPE_CHECKING:
    from bsft_saga.timeouts.dispatcher import DrainReport, drain_due


def __getattr__(name: str) -> Any:
    # Lazy: ``bsft_saga.timeouts`` is importable before the app registry is ready.
    if name in __all__:
        from bsft_saga.timeouts import dispatcher

        return getattr(dispatcher, name)
    raise AttributeError(f"module 'bsft_saga.timeouts' has no attribute {name!r}")
