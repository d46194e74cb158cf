"""Flows of the operations tests, and small builders for the rows those tests inspect.

``ReminderFlow`` is the workhorse: its start step schedules one timer whose event wakes
(and completes) the saga. ``QuoteFollowUpFlow`` is the example of
docs/operations/flow-diagrams.md, and ``ApprovalFlow`` a flow without auto-completion, for
``saga_graph``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from bsft_saga import SagaFlow
from tests.testapp.ops_events import (
    ApprovalRequested,
    Approved,
    NudgeRequested,
    NudgeSent,
    QuoteAccepted,
    QuoteFollowUpDue,
    QuoteSent,
    QuoteWithdrawn,
    ReminderDue,
    ReminderRequested,
)

if TYPE_CHECKING:
    from bsft_saga.models import SagaInstance, SagaTimeout

REMINDER_SAGA_TYPE = "tests.ops.reminder"
REMINDER_TIMER = "remind"


@dataclass
class ReminderState:
    reminded: bool = False


def schedule_reminder(ctx: Any, e: ReminderRequested) -> None:
    ctx.schedule_timeout(
        REMINDER_TIMER, timedelta(seconds=e.delay_seconds), ReminderDue(e.key), scope="saga"
    )


def remember_reminder(ctx: Any, e: ReminderDue) -> None:
    ctx.state.reminded = True


class ReminderFlow(SagaFlow):
    """One timer per instance; its event completes the saga."""

    saga_type = REMINDER_SAGA_TYPE

    def configure(self, factory: Any) -> None:
        (
            factory.with_state(ReminderState)
            .start_with(ReminderRequested, key=lambda e: e.key)
            .then(schedule_reminder)
            .wait_for(ReminderDue, key=lambda e: e.key)
            .then(remember_reminder)
            .complete()
        )


NUDGE_SAGA_TYPE = "tests.ops.nudge"
NUDGE_TIMER = "nudge"


def schedule_nudge(ctx: Any, e: NudgeRequested) -> None:
    ctx.schedule_timeout(NUDGE_TIMER, timedelta(0), NudgeSent(e.key), scope="saga")


class NudgeFlow(SagaFlow):
    """Schedules one timer whose event no saga awaits; the instance stays active."""

    saga_type = NUDGE_SAGA_TYPE

    def configure(self, factory: Any) -> None:
        factory.stateless().start_with(NudgeRequested, key=lambda e: e.key).then(
            schedule_nudge
        ).build()


# -- the flow of docs/operations/flow-diagrams.md ----------------------------------------------


@dataclass
class QuoteState:
    followed_up: bool = False
    accepted: bool = False
    expired: bool = False


def schedule_follow_up(ctx: Any, e: QuoteSent) -> None:
    ctx.schedule_timeout("followup", timedelta(days=2), QuoteFollowUpDue(e.quote_id))


def send_follow_up(ctx: Any, e: QuoteFollowUpDue) -> None:
    ctx.state.followed_up = True


def record_answer(ctx: Any, e: QuoteAccepted | QuoteWithdrawn) -> None:
    ctx.state.accepted = isinstance(e, QuoteAccepted)


def expire_quote(ctx: Any, e: Any) -> None:
    ctx.state.expired = True
    ctx.mark_complete()


class QuoteFollowUpFlow(SagaFlow):
    saga_type = "quotes.follow-up"

    def configure(self, factory: Any) -> None:
        (
            factory.with_state(QuoteState)
            .with_deadline(timedelta(days=14), on_expired=expire_quote)
            .start_with(QuoteSent, key=lambda e: e.quote_id)
            .then(schedule_follow_up)
            .wait_for(QuoteFollowUpDue, key=lambda e: e.quote_id)
            .then(send_follow_up)
            .wait_for(QuoteAccepted, key=lambda e: e.quote_id)
            .or_(QuoteWithdrawn, key=lambda e: e.quote_id)
            .then(record_answer)
            .complete()
        )


def is_urgent(ctx: Any, e: Approved) -> bool:
    return e.request_id.startswith("urgent-")


def finish(ctx: Any, e: Approved) -> None:
    ctx.mark_complete()


class ApprovalFlow(SagaFlow):
    """Completes only by ``ctx.mark_complete()`` (``build()``, no final state in a graph)."""

    saga_type = "tests.ops.approval"

    def configure(self, factory: Any) -> None:
        (
            factory.stateless()
            .start_with(ApprovalRequested, key=lambda e: e.request_id)
            .wait_for(Approved, key=lambda e: e.request_id)
            .when(is_urgent, finish)
            .then(lambda ctx, e: None)
            .build()
        )


FLOWS: list[type[SagaFlow]] = [ReminderFlow, NudgeFlow, QuoteFollowUpFlow, ApprovalFlow]


# -- row builders -----------------------------------------------------------------------------


def make_saga(
    key: str = "k",
    *,
    saga_type: str = REMINDER_SAGA_TYPE,
    complete: bool = False,
    now: datetime | None = None,
) -> SagaInstance:
    """An instance row written directly, as if the engine had started it at ``now``."""
    from bsft_saga import clock
    from bsft_saga.models import SagaInstance

    moment = now or clock.now()
    return SagaInstance.objects.create(
        saga_type=saga_type,
        correlation_key=key,
        state_type="tests.testapp.ops_flows.ReminderState",
        state={"reminded": False},
        step_index=1,
        is_complete=complete,
        created_at=moment,
        updated_at=moment,
        completed_at=moment if complete else None,
    )


def make_timer(
    saga: SagaInstance,
    name: str = REMINDER_TIMER,
    *,
    outcome: str | None = None,
    due_at: datetime | None = None,
    dispatched_at: datetime | None = None,
    attempts: int | None = None,
    reason: str = "UnknownEventType: tests.ops.renamed-away",
    event_type: str = "tests.ops.reminder-due",
) -> SagaTimeout:
    """A timer row: pending when ``outcome`` is None, else retired at ``dispatched_at``.

    A dead-lettered row gets ``reason`` as its ``dead_letter_reason`` and ``last_error``.
    """
    from bsft_saga import clock
    from bsft_saga.models import SagaTimeout, TimeoutOutcome

    moment = clock.now()
    due = due_at or moment
    retired_at = None if outcome is None else (dispatched_at or moment)
    dead = outcome == TimeoutOutcome.DEAD_LETTERED
    return SagaTimeout.objects.create(
        saga=saga,
        name=name,
        due_at=due,
        event_type=event_type,
        payload={"key": saga.correlation_key},
        message_id=uuid.uuid4(),
        scheduled_step_index=1,
        scheduled_at=due - timedelta(seconds=1),
        attempts=attempts if attempts is not None else (3 if dead else 0),
        last_error=reason if dead else "",
        dispatched_at=retired_at,
        outcome=outcome,
        dead_lettered_at=retired_at if dead else None,
        dead_letter_reason=reason if dead else "",
    )


def bulk_nudge_sagas(keys: list[str]) -> None:
    """Write, in two bulk inserts, what publishing ``NudgeRequested(key)`` for each key
    writes: an active ``NudgeFlow`` instance with one pending ``nudge`` timer, due now.

    Publishing a thousand start events one by one costs seconds per backend; the poison
    row test needs the rows, not the start steps (``test_bulk_nudge_rows_match_the_flow``
    keeps the two in step).
    """
    from bsft_saga import clock
    from bsft_saga.flows.registry import flow_registry
    from bsft_saga.models import SagaInstance, SagaTimeout

    moment = clock.now()
    state_type = flow_registry.get(NUDGE_SAGA_TYPE).state_type
    sagas = SagaInstance.objects.bulk_create(
        [
            SagaInstance(
                saga_type=NUDGE_SAGA_TYPE,
                correlation_key=key,
                state_type=state_type,
                state={},
                step_index=1,
                created_at=moment,
                updated_at=moment,
            )
            for key in keys
        ]
    )
    SagaTimeout.objects.bulk_create(
        [
            SagaTimeout(
                saga=saga,
                name=NUDGE_TIMER,
                # Due just before now, in the order of ``keys``.
                due_at=moment - timedelta(microseconds=len(sagas) - number),
                event_type="tests.ops.nudge-sent",
                payload={"key": saga.correlation_key},
                scope="saga",
                scheduled_step_index=1,
                scheduled_at=moment,
            )
            for number, saga in enumerate(sagas)
        ]
    )
