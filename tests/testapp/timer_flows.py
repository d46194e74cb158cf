"""Flows exercised by the timer tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from bsft_saga import SagaFlow
from tests.testapp.events import (
    CompensationRequested,
    Debited,
    Escalate,
    NudgeDue,
    QuoteAccepted,
    QuoteCallbackDue,
    QuoteFollowUpDue,
    QuoteSent,
    QuoteWithdrawn,
    TaskClosed,
    TaskOpened,
    TransferRequested,
)


@dataclass
class QuoteState:
    accepted: bool = False
    withdrawn: bool = False


def _schedule_reminders(ctx: Any, e: QuoteSent) -> None:
    ctx.schedule_timeout("followup", timedelta(days=2), QuoteFollowUpDue(e.quote_id))
    ctx.schedule_timeout("callback", timedelta(days=3), QuoteCallbackDue(e.quote_id))


def _decide(ctx: Any, e: QuoteAccepted | QuoteWithdrawn) -> None:
    ctx.state.accepted = isinstance(e, QuoteAccepted)
    ctx.state.withdrawn = isinstance(e, QuoteWithdrawn)


class QuoteFlow(SagaFlow):
    """Reminders go to plain receivers; the saga itself awaits the customer's answer."""

    saga_type = "tests.quote"

    def configure(self, factory: Any) -> None:
        (
            factory.with_state(QuoteState)
            .start_with(QuoteSent, key=lambda e: e.quote_id)
            .then(_schedule_reminders)
            .wait_for(QuoteAccepted, key=lambda e: e.quote_id)
            .or_(QuoteWithdrawn, key=lambda e: e.quote_id)
            .then(_decide)
            .complete()
        )


@dataclass
class TaskState:
    nudged: int = 0
    closed: bool = False
    escalations: int = 0


def _open(ctx: Any, e: TaskOpened) -> None:
    ctx.schedule_timeout(
        "nudge", timedelta(seconds=e.nudge_after_seconds), NudgeDue(e.task_id), calendar=e.calendar
    )
    ctx.schedule_timeout("escalate", timedelta(days=7), Escalate(e.task_id), scope="saga")


def _nudged(ctx: Any, e: NudgeDue) -> None:
    ctx.state.nudged += 1


class TaskFlow(SagaFlow):
    """Its own timer wakes its next step (the timer is stamped in the step's commit)."""

    saga_type = "tests.task"

    def configure(self, factory: Any) -> None:
        (
            factory.with_state(TaskState)
            .start_with(TaskOpened, key=lambda e: e.task_id)
            .then(_open)
            .wait_for(NudgeDue, key=lambda e: e.task_id)
            .then(_nudged)
            .wait_for(TaskClosed, key=lambda e: e.task_id)
            .then(lambda ctx, e: setattr(ctx.state, "closed", True))
            .complete()
        )


@dataclass
class TransferState:
    debited: bool = False
    expired_at_step: int = -1
    history: list[str] = field(default_factory=list)


def _expired(ctx: Any, e: Any) -> None:
    ctx.state.history.append("expired")
    if ctx.state.debited:
        ctx.publish(CompensationRequested(ctx.correlation_key), ignore_deadline=True)
    ctx.mark_complete()


class TransferFlow(SagaFlow):
    saga_type = "tests.transfer"

    def configure(self, factory: Any) -> None:
        (
            factory.with_state(TransferState)
            .with_deadline(timedelta(minutes=30), on_expired=_expired)
            .start_with(TransferRequested, key=lambda e: e.transfer_id)
            .then(lambda ctx, e: ctx.state.history.append("requested"))
            .wait_for(Debited, key=lambda e: e.transfer_id)
            .then(lambda ctx, e: setattr(ctx.state, "debited", True))
            .wait_for(TaskClosed, key=lambda e: e.task_id)
            .complete()
        )


FLOWS: list[type[SagaFlow]] = [QuoteFlow, TaskFlow, TransferFlow]
