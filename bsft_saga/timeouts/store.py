"""Timer writes made inside a step's persistence window.

The window has already taken the saga row's lock (its version-checked update, or the
insert of a new instance), so these writes are serialised per saga. The one write that can
still collide is a new pending name meeting a timer requeued at the same moment: the
partial unique constraint refuses the insert, and the window re-applies the event, whose
schedule then replaces the requeued timer.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from bsft_saga.db import sql
from bsft_saga.db.datetimes import storable
from bsft_saga.models import SagaTimeout, TimeoutOutcome, TimeoutScope
from bsft_saga.querysets import SagaTimeoutQuerySet
from bsft_saga.timeouts.requests import (
    RESERVED_PREFIX,
    CancelAllTimers,
    CancelTimer,
    TimerOperation,
    TimerRequest,
)

#: The W3C trace context of the step that schedules a timer (``telemetry.current_trace_context``).
TraceContext = Mapping[str, str] | None


def _values(
    request: TimerRequest,
    *,
    step_index: int,
    correlation_id: str | None,
    now: datetime,
    trace_context: TraceContext = None,
) -> dict[str, Any]:
    return {
        # Checked where it entered (schedule_timeout); again here for bsft_saga's own timers
        # (a deadline is start + budget), since a row out of range fails every later read.
        "due_at": storable(request.due_at, field="due_at", where=f"timer {request.name!r}"),
        "event_type": request.event_type,
        "payload": request.payload,
        "calendar_key": request.calendar_key,
        "correlation_id": correlation_id or "",
        "trace_context": None if trace_context is None else dict(trace_context),
        "scope": request.scope,
        "ignore_deadline": request.ignore_deadline,
        "scheduled_step_index": step_index,
        "scheduled_at": now,
        "attempts": 0,
        "last_error": "",
        "next_attempt_at": None,
        # A replaced timer is a new message; a dispatcher holding the old claim is fenced.
        "message_id": uuid.uuid4(),
        "claim_token": None,
        "claimed_until": None,
    }


def rows_for_new(
    saga_id: uuid.UUID,
    operations: Sequence[TimerOperation],
    *,
    step_index: int,
    correlation_id: str | None,
    now: datetime,
    trace_context: TraceContext = None,
) -> list[dict[str, Any]]:
    """The timer rows of an instance that is being created, for one INSERT.

    Nothing else knows the new saga yet, so its operations are resolved in memory (a later
    schedule of a name replaces an earlier one, a cancel drops it); no conflict is possible.
    """
    pending: dict[str, TimerRequest] = {}
    for operation in operations:
        if isinstance(operation, TimerRequest):
            pending.pop(operation.name, None)  # a replaced timer moves to the end
            pending[operation.name] = operation
        elif isinstance(operation, CancelTimer):
            pending.pop(operation.name, None)
        elif isinstance(operation, CancelAllTimers):
            pending = {n: r for n, r in pending.items() if n.startswith(RESERVED_PREFIX)}
    return [
        {
            "saga": saga_id,
            "name": name,
            **_values(
                request,
                step_index=step_index,
                correlation_id=correlation_id,
                now=now,
                trace_context=trace_context,
            ),
        }
        for name, request in pending.items()
    ]


def schedule(
    saga_id: uuid.UUID,
    request: TimerRequest,
    *,
    step_index: int,
    correlation_id: str | None,
    now: datetime,
    trace_context: TraceContext = None,
) -> None:
    """Write ``request``, replacing a pending timer of the same name in place (its trace
    context too: the replacing step's)."""
    values = _values(
        request,
        step_index=step_index,
        correlation_id=correlation_id,
        now=now,
        trace_context=trace_context,
    )
    pending = {"saga": saga_id, "name": request.name, "dispatched_at": None}
    if not sql.update(SagaTimeout, values, pending):
        sql.insert(SagaTimeout, [{"saga": saga_id, "name": request.name, **values}])


def cancel(saga_id: uuid.UUID, name: str, *, now: datetime) -> int:
    return sql.update(
        SagaTimeout, _canceled(now), {"saga": saga_id, "name": name, "dispatched_at": None}
    )


def cancel_all(saga_id: uuid.UUID, *, now: datetime, keep_internal: bool = False) -> int:
    """Cancel the saga's pending timers; ``keep_internal`` spares bsft_saga's own."""
    pending = SagaTimeout.objects.pending().filter(saga_id=saga_id)
    if keep_internal:
        pending = pending.exclude(name__startswith=RESERVED_PREFIX)
    return _cancel(pending, now)


def cancel_step_scoped(saga_id: uuid.UUID, *, now: datetime) -> int:
    """Cancel the timers of the wait that just ended."""
    return sql.update(
        SagaTimeout,
        _canceled(now),
        {"saga": saga_id, "scope": TimeoutScope.STEP, "dispatched_at": None},
    )


def _cancel(queryset: SagaTimeoutQuerySet, now: datetime) -> int:
    return queryset.update(**_canceled(now))


def _canceled(now: datetime) -> dict[str, Any]:
    return {
        "dispatched_at": now,
        "outcome": TimeoutOutcome.CANCELED,
        "next_attempt_at": None,
        "claim_token": None,
        "claimed_until": None,
    }
