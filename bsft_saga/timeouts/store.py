"""Timer writes made inside a step's persistence window.

The window has already taken the saga row's lock (its version-checked update), so these
writes are serialised per saga. The upsert still survives a concurrent insert of the same
pending name: the partial unique constraint turns the race into an update.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from django.db import IntegrityError, transaction

from bsft_saga.events.envelope import TimerOrigin
from bsft_saga.models import SagaTimeout, TimeoutOutcome, TimeoutScope
from bsft_saga.querysets import SagaTimeoutQuerySet
from bsft_saga.timeouts.requests import RESERVED_PREFIX, TimerRequest


def schedule(
    saga_id: uuid.UUID,
    request: TimerRequest,
    *,
    step_index: int,
    correlation_id: str | None,
    now: datetime,
) -> None:
    """Write ``request``, replacing a pending timer of the same name in place."""
    values = {
        "due_at": request.due_at,
        "event_type": request.event_type,
        "payload": request.payload,
        "calendar_key": request.calendar_key,
        "correlation_id": correlation_id or "",
        "scope": request.scope,
        "scheduled_step_index": step_index,
        "scheduled_at": now,
        "attempts": 0,
        "last_error": "",
        # A replaced timer is a new message; a dispatcher holding the old claim is fenced.
        "message_id": uuid.uuid4(),
        "claim_token": None,
        "claimed_until": None,
    }
    pending = SagaTimeout.objects.pending().filter(saga_id=saga_id, name=request.name)
    if pending.update(**values):
        return
    try:
        with transaction.atomic():
            SagaTimeout.objects.create(saga_id=saga_id, name=request.name, **values)
    except IntegrityError:
        if not pending.update(**values):
            raise


def cancel(saga_id: uuid.UUID, name: str, *, now: datetime) -> int:
    return _cancel(SagaTimeout.objects.pending().filter(saga_id=saga_id, name=name), now)


def cancel_all(saga_id: uuid.UUID, *, now: datetime, keep_internal: bool = False) -> int:
    """Cancel the saga's pending timers; ``keep_internal`` spares bsft_saga's own."""
    pending = SagaTimeout.objects.pending().filter(saga_id=saga_id)
    if keep_internal:
        pending = pending.exclude(name__startswith=RESERVED_PREFIX)
    return _cancel(pending, now)


def cancel_step_scoped(saga_id: uuid.UUID, *, now: datetime) -> int:
    """Cancel the timers of the wait that just ended."""
    return _cancel(
        SagaTimeout.objects.pending().filter(saga_id=saga_id, scope=TimeoutScope.STEP), now
    )


def _cancel(queryset: SagaTimeoutQuerySet, now: datetime) -> int:
    return queryset.update(
        dispatched_at=now, outcome=TimeoutOutcome.CANCELED, claim_token=None, claimed_until=None
    )


def stamp_fired(origin: TimerOrigin, *, now: datetime) -> bool:
    """Stamp the timer that woke this step as fired, if ``origin`` still holds its claim."""
    return bool(
        SagaTimeout.objects.pending()
        .filter(pk=origin.timeout_id, claim_token=origin.claim_token)
        .update(dispatched_at=now, outcome=TimeoutOutcome.FIRED)
    )
