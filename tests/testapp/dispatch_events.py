"""Events of the dispatcher tests (see tests/testapp/dispatch_flows.py)."""

from __future__ import annotations

from dataclasses import dataclass

from bsft_saga import event


@event("tests.dispatch.invoice-sent")
@dataclass(frozen=True)
class InvoiceSent:
    invoice_id: str
    remind_after_seconds: int = 0


@event("tests.dispatch.invoice-reminder-due")
@dataclass(frozen=True)
class InvoiceReminderDue:
    """Wakes the invoice's saga, and a plain receiver mails the customer."""

    invoice_id: str


@event("tests.dispatch.invoice-paid")
@dataclass(frozen=True)
class InvoicePaid:
    invoice_id: str


@event("tests.dispatch.notice-opened")
@dataclass(frozen=True)
class NoticeOpened:
    notice_id: str


@event("tests.dispatch.notice-due")
@dataclass(frozen=True)
class NoticeDue:
    notice_id: str
    which: str


@event("tests.dispatch.question-asked")
@dataclass(frozen=True)
class QuestionAsked:
    question_id: str
    expire_after_seconds: int = 0


@event("tests.dispatch.question-answered")
@dataclass(frozen=True)
class QuestionAnswered:
    question_id: str


@event("tests.dispatch.question-expired")
@dataclass(frozen=True)
class QuestionExpired:
    question_id: str
