"""Row builders for the retention tests: instances, inbox, outbox and audit rows at given times.

Timer rows come from ``tests.testapp.ops_flows.make_timer``; the instance rows here add
what the engine writes for a finished or running saga that handled ``events`` events.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from bsft_saga.models import (
    JournalKind,
    JournalVia,
    SagaAuditRecord,
    SagaInboxEntry,
    SagaInstance,
    SagaJournalEntry,
    SagaOutboxMessage,
    SagaTimeout,
    TimeoutOutcome,
)
from tests.testapp.ops_flows import REMINDER_SAGA_TYPE, make_saga


def saga(
    key: str,
    *,
    completed_at: datetime | None = None,
    started_at: datetime,
    events: int = 1,
    saga_type: str = REMINDER_SAGA_TYPE,
) -> SagaInstance:
    """An instance that handled ``events`` events (one inbox row each) since ``started_at``;
    completed at ``completed_at``, or active when that is None."""
    row = make_saga(key, saga_type=saga_type, complete=completed_at is not None, now=started_at)
    if completed_at is not None:
        SagaInstance.objects.filter(pk=row.pk).update(
            completed_at=completed_at, updated_at=completed_at
        )
        row.refresh_from_db()
    _handled(_inbox_row(row, started_at) for _ in range(events))
    return row


def outbox_row(
    saga: SagaInstance | None,
    *,
    created_at: datetime,
    delivered_at: datetime | None = None,
    dead_lettered_at: datetime | None = None,
) -> SagaOutboxMessage:
    """An outbox row of ``saga`` (None: a ``publish(..., defer=True)`` row): pending
    unless delivered or dead-lettered at the given time."""
    return SagaOutboxMessage.objects.create(
        saga=saga,
        event_type="tests.ops.noted",
        payload={"note": "retention"},
        created_at=created_at,
        delivered_at=delivered_at,
        dead_lettered_at=dead_lettered_at,
        attempts=10 if dead_lettered_at else 0,
        last_error="RuntimeError: receiver down" if dead_lettered_at else "",
    )


def audit_record(recorded_at: datetime, *, instance: SagaInstance | None = None) -> SagaAuditRecord:
    return SagaAuditRecord.objects.create(
        action="saga.instance.read-content",
        saga_type=instance.saga_type if instance else REMINDER_SAGA_TYPE,
        correlation_key=instance.correlation_key if instance else "",
        instance_id=instance.pk if instance else None,
        recorded_at=recorded_at,
    )


def bulk_finished_sagas(
    count: int, *, completed_at: datetime, inbox_per_saga: int, prefix: str = "bulk"
) -> None:
    """``count`` finished instances, each with ``inbox_per_saga`` inbox rows, one fired timer
    and one delivered outbox row, all retired at ``completed_at``; in a few bulk inserts."""
    started_at = completed_at - timedelta(hours=1)
    instances = SagaInstance.objects.bulk_create(
        SagaInstance(
            saga_type=REMINDER_SAGA_TYPE,
            correlation_key=f"{prefix}-{number}",
            state_type="tests.testapp.ops_flows.ReminderState",
            state={"reminded": True},
            step_index=2,
            is_complete=True,
            created_at=started_at,
            updated_at=completed_at,
            completed_at=completed_at,
        )
        for number in range(count)
    )
    _handled(
        _inbox_row(instance, started_at) for instance in instances for _ in range(inbox_per_saga)
    )
    SagaTimeout.objects.bulk_create(
        SagaTimeout(saga=instance, **_fired_timer(started_at, completed_at))
        for instance in instances
    )
    SagaOutboxMessage.objects.bulk_create(
        SagaOutboxMessage(
            saga=instance,
            event_type="tests.ops.noted",
            payload={"note": "bulk"},
            created_at=completed_at,
            delivered_at=completed_at,
        )
        for instance in instances
    )


def _handled(inbox: Iterable[SagaInboxEntry]) -> None:
    """Inbox rows with the journal entry the engine writes beside each."""
    rows = SagaInboxEntry.objects.bulk_create(inbox)
    SagaJournalEntry.objects.bulk_create(
        SagaJournalEntry(
            saga=row.saga,
            at=row.handled_at,
            kind=JournalKind.ADVANCED,
            event_type=row.event_type,
            message_id=row.message_id,
            via=JournalVia.PUBLISH,
        )
        for row in rows
    )


def _inbox_row(saga: SagaInstance, handled_at: datetime) -> SagaInboxEntry:
    """The inbox row of one handled start event."""
    return SagaInboxEntry(
        saga=saga,
        message_id=uuid.uuid4(),
        event_type="tests.ops.reminder-requested",
        handled_at=handled_at,
    )


def _fired_timer(scheduled_at: datetime, fired_at: datetime) -> dict[str, Any]:
    return {
        "name": "remind",
        "due_at": fired_at,
        "event_type": "tests.ops.reminder-due",
        "payload": {"key": "bulk"},
        "scheduled_step_index": 1,
        "scheduled_at": scheduled_at,
        "dispatched_at": fired_at,
        "outcome": TimeoutOutcome.FIRED,
    }
