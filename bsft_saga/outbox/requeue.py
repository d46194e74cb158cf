"""Requeueing dead-lettered outbox rows."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from bsft_saga.delivery import requeue
from bsft_saga.delivery.requeue import RequeueReport
from bsft_saga.outbox.channel import OUTBOX
from bsft_saga.progress import Progress


def requeue_dead_lettered(
    ids: Iterable[uuid.UUID] | None = None, *, user: Any = None, progress: Progress | None = None
) -> RequeueReport:
    """Make dead-lettered outbox rows deliverable again (``None``: all of them); the next
    pass delivers them. Each requeue is audited under ``user`` (``None``: code or a
    command). See ``bsft_saga.delivery.requeue``, also for ``progress``."""
    wanted = None if ids is None else list(ids)
    return requeue.requeue_dead_lettered(OUTBOX, wanted, user=user, progress=progress)
