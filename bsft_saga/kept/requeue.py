"""Requeueing dead-lettered kept events."""

from __future__ import annotations

from typing import Any

from bsft_saga.delivery import requeue
from bsft_saga.kept.channel import KEPT


def requeue_dead_lettered(ids: Any = None, *, user: Any = None, progress: Any = None) -> Any:
    """Make dead-lettered kept events pending again (``None``: all of them): one whose saga
    is at its step is applied by the next drain. Each requeue is audited under ``user``
    (``"saga.kept.requeued"``; ``None``: code or a command) and journaled. See
    ``bsft_saga.delivery.requeue``, also for ``progress``."""
    wanted = None if ids is None else list(ids)
    return requeue.requeue_dead_lettered(KEPT, wanted, user=user, progress=progress)
