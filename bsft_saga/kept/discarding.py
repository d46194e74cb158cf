"""Dropping kept events that no step will apply, each counted ignored (``not_awaited``)."""

from __future__ import annotations

import uuid
from datetime import datetime
from functools import partial

from django.db import transaction
from django.db.models import Count

from bsft_saga import telemetry
from bsft_saga.conf import saga_settings
from bsft_saga.models import SagaKeptEvent
from bsft_saga.querysets import SagaKeptEventQuerySet


def discard(saga_id: uuid.UUID) -> None:
    """Discard the kept rows of a saga completing in the current transaction."""
    discard_rows(SagaKeptEvent.objects.filter(saga_id=saga_id))


def discard_rows(rows: SagaKeptEventQuerySet) -> int:
    """Delete ``rows``, kept events no step will apply: each that was still to be applied
    is counted ignored (``not_awaited``) once the current transaction commits (a dead
    letter was counted as one already). Return how many rows went.

    Every path that drops kept events unapplied comes here: a saga that moves past their
    step, one that completes, a key whose saga did not start within ``KEEP_EARLY_FOR``.
    """
    pending = list(rows.pending().order_by().values_list("saga_type").annotate(n=Count("pk")))
    deleted, _ = rows.delete()
    if pending:
        transaction.on_commit(partial(_count_discarded, pending))
    return deleted


def _count_discarded(pending: list[tuple[str, int]]) -> None:
    for saga_type, n in pending:
        for _ in range(n):
            telemetry.count_ignored(saga_type, "not_awaited")


def discard_expired(*, now: datetime, limit: int) -> int:
    """Discard up to ``limit`` events kept for a key whose saga did not start within
    ``KEEP_EARLY_FOR``; each is counted ignored (``not_awaited``). Return how many."""
    cutoff = now - saga_settings.engine.keep_early_for
    expired = SagaKeptEvent.objects.without_saga().filter(kept_at__lt=cutoff)
    pks = list(expired.order_by("kept_at").values_list("pk", flat=True)[:limit])
    return discard_rows(expired.filter(pk__in=pks)) if pks else 0
