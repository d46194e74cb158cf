"""What a careful team would write by hand instead of using bsft_saga: the baselines.

The first two do the same transactional work as the library, on the same tables and
indexes, in plain Django ORM, and nothing else. What they leave out is what the ratios price in: no
routing of events to flows, no step guard, no inbox check before the write (the unique
constraint would refuse a duplicate), no catch-up policy, no claim lease (a crash simply
releases the row locks), no attempt counting, back-off or dead-lettering, no signal
receivers or telemetry (the one correlation id it writes is a fresh one, as the engine
writes). A production loop would need most of these; the baselines are the fastest honest
version of the work written with the ORM, not a straw man.

The third, :class:`RawBatch`, is the ceiling rather than a rival: psycopg 3 without Django,
writing for each fired reminder the rows and statements the library writes (the saga's
version-checked update with its inbox row in one statement, then the stamp), for a batch
claimed by one ``SKIP LOCKED`` poll and committed once. It pays no Python for envelopes,
codecs, signals or model instances, and its statements are prepared by psycopg after their
fifth use: what is left between the library and it is the price of everything the library
does for each timer.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
from django.db import connection, transaction
from django.utils import timezone
from psycopg.types.json import Jsonb

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


@dataclass(frozen=True)
class RawBatch:
    """The raw ceiling: psycopg 3 on a connection of its own, a batch per transaction.

    The statements are written once, here, from the models' table and column names (the
    only use of Django: nothing of it runs in the loop). Per batch: ``BEGIN``, the poll
    (``SELECT … FOR UPDATE SKIP LOCKED`` of the oldest due pending timers, ``LIMIT``
    ``batch_size``, down the same partial index as the hand-written loop), one ``SELECT`` of
    their sagas' state, per timer the library's two writes, ``COMMIT``. Concurrent loops take
    disjoint rows.
    """

    poll: str
    sagas: str
    advance: str
    stamp: str

    @classmethod
    def for_models(cls) -> RawBatch:
        quote = connection.ops.quote_name
        timers, instances = quote(SagaTimeout._meta.db_table), quote(SagaInstance._meta.db_table)
        inbox = quote(SagaInboxEntry._meta.db_table)
        return cls(
            poll=(
                f"SELECT id, saga_id, message_id, event_type FROM {timers} "
                "WHERE dispatched_at IS NULL AND due_at <= %s ORDER BY due_at, id LIMIT %s "
                "FOR UPDATE SKIP LOCKED"
            ),
            sagas=f"SELECT id, state, step_index, version FROM {instances} WHERE id = ANY(%s)",
            advance=(
                f'WITH "w0" AS (UPDATE {instances} SET version = %s, state = %s, '
                "step_index = %s, updated_at = %s, is_complete = false, completed_at = NULL "
                "WHERE id = %s AND version = %s AND is_complete = false RETURNING 1) "
                f"INSERT INTO {inbox} (saga_id, message_id, event_type, handled_at) "
                "SELECT CAST(%s AS uuid), CAST(%s AS uuid), CAST(%s AS varchar(200)), "
                'CAST(%s AS timestamp with time zone) FROM "w0"'
            ),
            stamp=(
                f"UPDATE {timers} SET dispatched_at = %s, outcome = %s, claimed_until = NULL, "
                "next_attempt_at = NULL WHERE id = %s AND dispatched_at IS NULL"
            ),
        )

    def fire_batch(self, conn: psycopg.Connection[Any], batch_size: int) -> int:
        """Fire up to ``batch_size`` due reminders in one transaction; how many it fired."""
        now = datetime.now(UTC)
        with conn.transaction():
            timers = conn.execute(self.poll, (now, batch_size)).fetchall()
            if not timers:
                return 0
            sagas = {
                saga_id: rest
                for saga_id, *rest in conn.execute(self.sagas, ([t[1] for t in timers],))
            }
            for timer_id, saga_id, message_id, event_type in timers:
                state, step_index, version = sagas[saga_id]
                advanced = conn.execute(
                    self.advance,
                    (
                        version + 1,
                        Jsonb({**state, "count": state["count"] + 1}),
                        step_index + 1,
                        now,
                        saga_id,
                        version,
                        saga_id,
                        message_id,
                        event_type,
                        now,
                    ),
                )
                if advanced.rowcount != 1:
                    raise RuntimeError(f"saga {saga_id} changed under its locked timer")
                conn.execute(self.stamp, (now, TimeoutOutcome.FIRED.value, timer_id))
        return len(timers)
