"""Rows written in bulk, in exactly the shape the engine writes them (load and fault tests).

Publishing thousands of start events one by one takes minutes; these tests need the rows,
not the start steps.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from bsft_saga.events import codec
from bsft_saga.events.registry import event_type_of
from bsft_saga.flows.registry import flow_registry
from bsft_saga.models import SagaInboxEntry, SagaInstance, SagaTimeout, TimeoutScope
from tests.testapp.load_events import CountStarted, CountWake
from tests.testapp.load_flows import WAKE_TIMER, CountingFlow


def bulk_start_counters(keys: list[str], now: datetime) -> None:
    """Write what publishing ``CountStarted(key)`` writes, for every key, in bulk.

    Publishing 10,000 start events takes about a minute (roughly 200 a second on
    PostgreSQL), so the backlog is inserted directly: per key, the instance after its start
    step (version 1, step_index 1, state as the codec writes it), the start event's inbox
    row, and the wake-up timer exactly as ``timeouts.store.schedule`` writes it, due now.
    ``tests/test_timeouts_load.py::test_bulk_rows_have_the_shape_the_engine_writes`` pins
    that equivalence.
    """
    flow = flow_registry.get(CountingFlow)
    instances, inbox, timers = [], [], []
    for key in keys:
        saga_id = uuid.uuid4()
        instances.append(
            SagaInstance(
                id=saga_id,
                saga_type=flow.saga_type,
                correlation_key=key,
                state_type=flow.state_type,
                state=codec.encode(flow.new_state()),
                step_index=1,
                is_complete=False,
                created_at=now,
                updated_at=now,
                completed_at=None,
                deadline=None,
                version=1,
            )
        )
        inbox.append(
            SagaInboxEntry(
                saga_id=saga_id,
                message_id=uuid.uuid4(),
                event_type=event_type_of(CountStarted),
                handled_at=now,
            )
        )
        timers.append(
            SagaTimeout(
                saga_id=saga_id,
                name=WAKE_TIMER,
                due_at=now,
                event_type=event_type_of(CountWake),
                payload=codec.encode(CountWake(key)),
                message_id=uuid.uuid4(),
                calendar_key="",
                correlation_id=uuid.uuid4().hex,  # what publish() gives an event without one
                scope=TimeoutScope.STEP,
                scheduled_step_index=1,
                scheduled_at=now,
                attempts=0,
                last_error="",
            )
        )
    SagaInstance.objects.bulk_create(instances, batch_size=2000)
    SagaInboxEntry.objects.bulk_create(inbox, batch_size=2000)
    SagaTimeout.objects.bulk_create(timers, batch_size=2000)
