"""Journal entries written directly, as the engine writes them, for the readers' tests."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from bsft_saga.models import JournalKind, JournalVia, SagaInstance, SagaJournalEntry


def entry(
    saga: SagaInstance,
    kind: JournalKind,
    at: datetime,
    *,
    via: JournalVia = JournalVia.PUBLISH,
    step_before: int | None = None,
    step_after: int | None = None,
    **fields: Any,
) -> SagaJournalEntry:
    """One entry of ``saga`` at ``at``; a transition's event type and message id by default."""
    values: dict[str, Any] = {
        "event_type": f"tests.ops.{kind}",
        "message_id": uuid.uuid4(),
        "version": step_after,
        **fields,
    }
    return SagaJournalEntry.objects.create(
        saga=saga,
        kind=kind,
        at=at,
        via=via,
        step_before=step_before,
        step_after=step_after,
        **values,
    )


def advanced_by_timer(
    saga: SagaInstance, at: datetime, *, timer_name: str = "remind", step_before: int = 1
) -> SagaJournalEntry:
    """The entry of a timer of ``saga`` that woke its next step."""
    return entry(
        saga,
        JournalKind.ADVANCED,
        at,
        via=JournalVia.TIMER,
        step_before=step_before,
        step_after=step_before + 1,
        timer_name=timer_name,
    )


def timer_canceled_by(
    saga: SagaInstance, at: datetime, user: str, *, timer_name: str = "escalate", step: int = 2
) -> SagaJournalEntry:
    """The entry of an operator who canceled a timer of ``saga`` (the version does not move)."""
    return entry(
        saga,
        JournalKind.TIMER_CANCELED,
        at,
        via=JournalVia.OPERATOR,
        step_before=step,
        step_after=step,
        version=None,
        event_type="",
        message_id=None,
        timer_name=timer_name,
        user=user,
    )


def shown_timer_canceled_by(
    user: str, at: str, *, timer_name: str = "escalate", step: int = 2
) -> dict[str, Any]:
    """What a reader shows of :func:`timer_canceled_by`'s entry, by field name; ``at`` as
    that reader writes times."""
    return {
        "at": at,
        "kind": "timer_canceled",
        "event_type": "",
        "message_id": None,
        "step_before": step,
        "step_after": step,
        "version": None,
        "via": "operator",
        "timer_name": timer_name,
        "user": user,
        "correlation_id": "",
    }
