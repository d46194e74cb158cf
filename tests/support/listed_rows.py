"""Many kept events and delayed messages for one saga, written in bulk: more than an
instance page lists (``bsft_saga.listing.ROWS_LISTED``)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from bsft_saga.models import SagaInstance, SagaKeptEvent, SagaOutboxMessage

#: What each kept event's payload holds: content, shown only to content readers.
KEPT_SECRET = "kept-label-4711"


def keep_many(saga: SagaInstance, count: int, *, now: datetime) -> list[int]:
    """``count`` events kept for ``saga``'s next step, the i-th kept at ``now`` + i seconds
    (so oldest first is creation order); their ids in that order."""
    rows = SagaKeptEvent.objects.bulk_create(
        [
            SagaKeptEvent(
                saga=saga,
                saga_type=saga.saga_type,
                correlation_key=saga.correlation_key,
                step_index=saga.step_index + 1,
                event_type="tests.ops.parcel-packed",
                payload={"n": number, "label": KEPT_SECRET},
                message_id=uuid.uuid4(),
                kept_at=now + timedelta(seconds=number),
            )
            for number in range(count)
        ],
        batch_size=500,
    )
    return [row.pk for row in rows]


def delay_many(saga: SagaInstance, count: int, *, now: datetime) -> list[uuid.UUID]:
    """``count`` delayed messages of ``saga``, the i-th due at ``now`` + i + 1 hours (so
    soonest first is creation order); their ids in that order."""
    rows = SagaOutboxMessage.objects.bulk_create(
        [
            SagaOutboxMessage(
                saga=saga,
                event_type="tests.ops.reminder-due",
                payload={"n": number},
                created_at=now,
                deliver_at=now + timedelta(hours=number + 1),
            )
            for number in range(count)
        ],
        batch_size=500,
    )
    return [row.pk for row in rows]
