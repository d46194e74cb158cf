"""Rows written in bulk, in exactly the shape the engine writes them (load and fault tests).

Publishing thousands of start events one by one takes minutes; these tests need the rows,
not the start steps.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bsft_saga import SagaFlow
from bsft_saga.events import codec
from bsft_saga.events.registry import event_type_of
from bsft_saga.flows.registry import flow_registry
from bsft_saga.models import SagaInboxEntry, SagaInstance, SagaTimeout, TimeoutScope
from tests.testapp.dispatch_events import NoticeDue, NoticeOpened, QuestionAsked, QuestionExpired
from tests.testapp.dispatch_flows import NOTICE_TIMERS, NoticeFlow, QuestionFlow
from tests.testapp.load_events import CountStarted, CountWake
from tests.testapp.load_flows import WAKE_TIMER, CountingFlow


def bulk_start_counters(keys: list[str], now: datetime) -> None:
    """Write what publishing ``CountStarted(key)`` writes, for every key, in bulk.

    Publishing 10,000 start events takes about a minute (roughly 200 a second on
    PostgreSQL), so the backlog is inserted directly: per key, the instance after its start
    step (version 1, step_index 1, state as the codec writes it), the start event's inbox
    row, and the wake-up timer exactly as ``timeouts.store.schedule`` writes it, due now.
    ``tests/processes/test_timeouts_load.py::test_bulk_rows_have_the_shape_the_engine_writes`` pins
    that equivalence.
    """
    _bulk_started(
        CountingFlow,
        CountStarted,
        ((key, [_Timer(WAKE_TIMER, now, CountWake(key), TimeoutScope.STEP)]) for key in keys),
        now,
    )


@dataclass(frozen=True)
class _Timer:
    """One timer a start step schedules: what ``timeouts.store`` writes for it."""

    name: str
    due_at: datetime
    event: Any
    scope: TimeoutScope


def bulk_open_notices(due_at: Mapping[str, tuple[datetime, datetime]], now: datetime) -> None:
    """Write what publishing ``NoticeOpened(key)`` at ``now`` writes, for every key of
    ``due_at``, in bulk, except when its two timers are due: ``due_at[key]`` gives the
    instants of "reminder" and "final-notice" (the engine's are due at ``now``).

    The rows of a saga with two due timers after an outage. ``tests/processes/test_bulk_rows.py``
    pins the equivalence with the engine's rows.
    """
    _bulk_started(
        NoticeFlow,
        NoticeOpened,
        (
            (
                key,
                [
                    _Timer(name, due, NoticeDue(key, name), TimeoutScope.SAGA)
                    for name, due in zip(NOTICE_TIMERS, instants, strict=True)
                ],
            )
            for key, instants in due_at.items()
        ),
        now,
    )


def bulk_ask_questions(keys: list[str], expire_at: datetime, now: datetime) -> None:
    """Write what publishing ``QuestionAsked(key, expire_after_seconds=s)`` at ``now``
    writes, for every key, in bulk, with ``s`` such that every "expiry" is due at
    ``expire_at``. ``tests/processes/test_bulk_rows.py`` pins the equivalence with the
    engine's rows.
    """
    _bulk_started(
        QuestionFlow,
        QuestionAsked,
        (
            (key, [_Timer("expiry", expire_at, QuestionExpired(key), TimeoutScope.STEP)])
            for key in keys
        ),
        now,
    )


def _bulk_started(
    flow_class: type[SagaFlow],
    start_event: type,
    started: Iterable[tuple[str, list[_Timer]]],
    now: datetime,
) -> None:
    """Per key: the instance just after its start step (version 1, step_index 1, the new
    state), the start event's inbox row, and the step's timers under the start event's
    correlation id, as one publish at ``now`` writes them."""
    flow = flow_registry.get(flow_class)
    instances, inbox, timers = [], [], []
    for key, scheduled in started:
        saga_id = uuid.uuid4()
        correlation_id = uuid.uuid4().hex  # what publish() gives an event without one
        instances.append(
            SagaInstance(
                id=saga_id,
                saga_type=flow.saga_type,
                correlation_key=key,
                state_type=flow.state_type,
                state=codec.encode(flow.new_state()),
                step_index=1,
                created_at=now,
                updated_at=now,
                version=1,
            )
        )
        inbox.append(
            SagaInboxEntry(
                saga_id=saga_id,
                message_id=uuid.uuid4(),
                event_type=event_type_of(start_event),
                handled_at=now,
            )
        )
        timers += [
            SagaTimeout(
                saga_id=saga_id,
                name=timer.name,
                due_at=timer.due_at,
                event_type=event_type_of(type(timer.event)),
                payload=codec.encode(timer.event),
                message_id=uuid.uuid4(),
                correlation_id=correlation_id,
                scope=timer.scope,
                scheduled_step_index=1,
                scheduled_at=now,
            )
            for timer in scheduled
        ]
    SagaInstance.objects.bulk_create(instances, batch_size=2000)
    SagaInboxEntry.objects.bulk_create(inbox, batch_size=2000)
    SagaTimeout.objects.bulk_create(timers, batch_size=2000)
