"""Flows of the dispatcher tests: where user code runs, slow receivers, contention.

- ``InvoiceFlow``: a reminder timer wakes the saga, which then waits for the payment; a
  plain receiver of the reminder's event (the test's "mail") may be slow.
- ``NoticeFlow``: two saga-scoped timers due together, each handled by one of two steps
  that await either (a saga with two due timers after an outage).
- ``QuestionFlow``: ``wait_for(answer).or_(expiry)``, the expiry a step-scoped timer: a
  publisher racing an answer against the expiry locks the saga, then the timer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from bsft_saga import SagaFlow
from tests.testapp.dispatch_events import (
    InvoicePaid,
    InvoiceReminderDue,
    InvoiceSent,
    NoticeDue,
    NoticeOpened,
    QuestionAnswered,
    QuestionAsked,
    QuestionExpired,
)

NOTICE_TIMERS = ("reminder", "final-notice")


@dataclass
class InvoiceState:
    reminded: int = 0
    paid: bool = False


def _schedule_reminder(ctx: Any, e: InvoiceSent) -> None:
    ctx.schedule_timeout(
        "reminder", timedelta(seconds=e.remind_after_seconds), InvoiceReminderDue(e.invoice_id)
    )


def _remind(ctx: Any, e: InvoiceReminderDue) -> None:
    ctx.state.reminded += 1


def _pay(ctx: Any, e: InvoicePaid) -> None:
    ctx.state.paid = True


class InvoiceFlow(SagaFlow):
    saga_type = "tests.dispatch.invoice"

    def configure(self, factory: Any) -> None:
        (
            factory.with_state(InvoiceState)
            .start_with(InvoiceSent, key=lambda e: e.invoice_id)
            .then(_schedule_reminder)
            .wait_for(InvoiceReminderDue, key=lambda e: e.invoice_id)
            .then(_remind)
            .wait_for(InvoicePaid, key=lambda e: e.invoice_id)
            .then(_pay)
            .build()
        )


@dataclass
class NoticeState:
    fired: list[str] = field(default_factory=list)


def _schedule_notices(ctx: Any, e: NoticeOpened) -> None:
    for name in NOTICE_TIMERS:
        ctx.schedule_timeout(name, timedelta(0), NoticeDue(e.notice_id, name), scope="saga")


def _note(ctx: Any, e: NoticeDue) -> None:
    ctx.state.fired.append(e.which)


class NoticeFlow(SagaFlow):
    saga_type = "tests.dispatch.notice"

    def configure(self, factory: Any) -> None:
        (
            factory.with_state(NoticeState)
            .start_with(NoticeOpened, key=lambda e: e.notice_id)
            .then(_schedule_notices)
            .wait_for(NoticeDue, key=lambda e: e.notice_id)
            .then(_note)
            .wait_for(NoticeDue, key=lambda e: e.notice_id)
            .then(_note)
            .build()
        )


@dataclass
class QuestionState:
    outcome: str = ""


def _schedule_expiry(ctx: Any, e: QuestionAsked) -> None:
    ctx.schedule_timeout(
        "expiry", timedelta(seconds=e.expire_after_seconds), QuestionExpired(e.question_id)
    )


def _settle(ctx: Any, e: QuestionAnswered | QuestionExpired) -> None:
    if ctx.state.outcome:
        raise AssertionError(f"{e} applied to a question already {ctx.state.outcome}")
    ctx.state.outcome = "answered" if isinstance(e, QuestionAnswered) else "expired"


class QuestionFlow(SagaFlow):
    saga_type = "tests.dispatch.question"

    def configure(self, factory: Any) -> None:
        (
            factory.with_state(QuestionState)
            .start_with(QuestionAsked, key=lambda e: e.question_id)
            .then(_schedule_expiry)
            .wait_for(QuestionAnswered, key=lambda e: e.question_id)
            .or_(QuestionExpired, key=lambda e: e.question_id)
            .then(_settle)
            .build()
        )


FLOWS = [InvoiceFlow, NoticeFlow, QuestionFlow]
