"""Keeping an event that reached its saga (or its key) before the step that awaits it."""

from __future__ import annotations

import uuid
from datetime import datetime

from django.db import IntegrityError, transaction

from bsft_saga import telemetry
from bsft_saga.conf import saga_settings
from bsft_saga.events import payloads
from bsft_saga.events.envelope import Envelope
from bsft_saga.models import SagaInstance, SagaKeptEvent
from bsft_saga.querysets import SagaKeptEventQuerySet

#: What :func:`keep` did with an event.
KEPT_NOW = "kept"
DUPLICATE = "duplicate"
OVER_LIMIT = "kept_limit"


class LostRace(Exception):
    """The saga moved on (or completed) since the plan read it: plan again."""


class _OverLimit(Exception):
    """The saga (or key) already keeps ``MAX_KEPT_EVENTS_PER_SAGA`` events: write nothing."""


def keep(
    saga_id: uuid.UUID,
    version: int,
    step_index: int,
    envelope: Envelope,
    *,
    saga_type: str,
    correlation_key: str,
    now: datetime,
) -> str:
    """Keep ``envelope`` for the step ``step_index`` of the saga read at ``version``.

    ``KEPT_NOW``; ``DUPLICATE``: the saga already kept this message id; ``OVER_LIMIT``: it
    keeps ``MAX_KEPT_EVENTS_PER_SAGA`` events already (nothing written either way).
    ``LostRace``: the saga's version moved on; nothing was written.
    """
    try:
        with transaction.atomic():
            # Locks the saga's row while it is still at ``version``, without moving it on:
            # keeping is no transition of the saga.
            locked = SagaInstance.objects.filter(
                pk=saga_id, version=version, is_complete=False
            ).update(updated_at=now)
            if not locked:
                raise LostRace
            if _full(SagaKeptEvent.objects.filter(saga_id=saga_id)):
                raise _OverLimit
            _create(envelope, step_index, saga_type, correlation_key, now, saga_id=saga_id)
    except _OverLimit:
        return OVER_LIMIT
    except IntegrityError:
        if SagaKeptEvent.objects.filter(saga_id=saga_id, message_id=envelope.message_id).exists():
            return DUPLICATE
        raise
    return KEPT_NOW


def keep_for_key(
    saga_type: str, correlation_key: str, step_index: int, envelope: Envelope, *, now: datetime
) -> str:
    """Keep ``envelope`` for the saga that starts for ``saga_type`` and ``correlation_key``
    within ``KEEP_EARLY_FOR`` (none is active now), for its step ``step_index``.

    ``KEPT_NOW``, ``DUPLICATE`` or ``OVER_LIMIT``, as :func:`keep`.
    """
    unowned = SagaKeptEvent.objects.without_saga().filter(
        saga_type=saga_type, correlation_key=correlation_key
    )
    if _full(unowned):
        return OVER_LIMIT
    try:
        with transaction.atomic():
            _create(envelope, step_index, saga_type, correlation_key, now, saga_id=None)
    except IntegrityError:
        if unowned.filter(message_id=envelope.message_id).exists():
            return DUPLICATE
        raise
    return KEPT_NOW


def _full(rows: SagaKeptEventQuerySet) -> bool:
    limit = saga_settings.engine.max_kept_events_per_saga
    return rows.order_by().values("pk")[limit - 1 : limit].exists()


def _create(
    envelope: Envelope,
    step_index: int,
    saga_type: str,
    correlation_key: str,
    now: datetime,
    *,
    saga_id: uuid.UUID | None,
) -> None:
    SagaKeptEvent.objects.create(
        saga_id=saga_id,
        saga_type=saga_type,
        correlation_key=correlation_key,
        step_index=step_index,
        event_type=envelope.event_type,
        payload=payloads.encode_event(envelope.event, envelope.event_type),
        message_id=envelope.message_id,
        correlation_id=envelope.correlation_id or "",
        causation_id=envelope.causation_id,
        deadline=envelope.deadline,
        published_at=envelope.published_at,
        kept_at=now,
        trace_context=telemetry.current_trace_context(),
    )
