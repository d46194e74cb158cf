"""What a careful team would write by hand instead of using bsft_saga: the baselines.

Both do the same transactional work as the library, on the same tables and indexes, in
plain Django ORM, and nothing else. What they leave out is what the ratios price in: no
routing of events to flows, no step guard, no inbox check before the write (the unique
constraint would refuse a duplicate), no catch-up policy, no claim lease (a crash simply
releases the row locks), no attempt counting, back-off or dead-lettering, no signal
receivers or telemetry (the one correlation id it writes is a fresh one, as the engine
writes). A production loop would need most of these; the baselines are the fastest honest
version of the work written with the ORM, not a straw man.
"""

from __future__ import annotations

import uuid

from django.db import transaction
from django.utils import timezone

from bsft_saga.models import SagaInboxEntry, SagaInstance, SagaTimeout, TimeoutOutcome
from tests.testapp.load_flows import (
    BENCH_REMINDER_DELAY,
    BENCH_REMINDER_TIMER,
    BenchReminderFlow,
    BenchReminderState,
)

# Constants a hand-written version would spell out once.
_SAGA_TYPE = BenchReminderFlow.saga_type
_STATE_TYPE = f"{BenchReminderState.__module__}.{BenchReminderState.__qualname__}"
_START_EVENT_TYPE = "tests.load.bench-reminder-requested"
_REMINDER_EVENT_TYPE = "tests.load.bench-reminder-due"


def start_by_hand(key: str, note: str) -> None:
    """Write what publishing the start event writes: the instance, its inbox row and one
    pending reminder, in one ``transaction.atomic()`` (three INSERTs, one commit)."""
    now = timezone.now()
    with transaction.atomic():
        saga = SagaInstance.objects.create(
            saga_type=_SAGA_TYPE,
            correlation_key=key,
            state_type=_STATE_TYPE,
            state={"note": note},
            step_index=1,
            created_at=now,
            updated_at=now,
            version=1,
        )
        SagaInboxEntry.objects.create(
            saga=saga, message_id=uuid.uuid4(), event_type=_START_EVENT_TYPE, handled_at=now
        )
        SagaTimeout.objects.create(
            saga=saga,
            name=BENCH_REMINDER_TIMER,
            due_at=now + BENCH_REMINDER_DELAY,
            event_type=_REMINDER_EVENT_TYPE,
            payload={"request_id": key},
            correlation_id=uuid.uuid4().hex,
            scheduled_step_index=1,
            scheduled_at=now,
        )


def fire_one_by_hand() -> bool:
    """Fire the oldest due reminder in one ``transaction.atomic()``; False when none is due.

    ``SELECT … FOR UPDATE SKIP LOCKED`` of the oldest due pending timer (the partial
    ``(due_at, id)`` index serves it), lock and load its saga, write the new state (count
    + 1), step, version and ``updated_at``, insert the inbox row with the timer's message
    id, stamp the timer fired: five statements and one commit per reminder. Concurrent
    loops take disjoint rows.
    """
    with transaction.atomic():
        now = timezone.now()
        timer = (
            SagaTimeout.objects.filter(dispatched_at__isnull=True, due_at__lte=now)
            .order_by("due_at", "id")
            .select_for_update(skip_locked=True)
            .first()
        )
        if timer is None:
            return False
        saga = SagaInstance.objects.select_for_update().get(pk=timer.saga_id)
        SagaInstance.objects.filter(pk=saga.pk).update(
            state={**saga.state, "count": saga.state["count"] + 1},
            step_index=saga.step_index + 1,
            version=saga.version + 1,
            updated_at=now,
        )
        SagaInboxEntry.objects.create(
            saga_id=saga.pk,
            message_id=timer.message_id,
            event_type=timer.event_type,
            handled_at=now,
        )
        SagaTimeout.objects.filter(pk=timer.pk).update(
            dispatched_at=now, outcome=TimeoutOutcome.FIRED
        )
    return True
