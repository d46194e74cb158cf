"""Events of the test flows."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from bsft_saga import event


@event("tests.order.placed")
@dataclass(frozen=True)
class OrderPlaced:
    order_id: str
    total: Decimal = Decimal("0")


@event("tests.order.stock-reserved")
@dataclass(frozen=True)
class StockReserved:
    order_id: str


@event("tests.order.canceled")
@dataclass(frozen=True)
class OrderCanceled:
    order_id: str
    reason: str = ""


@event("tests.order.shipped")
@dataclass(frozen=True)
class OrderShipped:
    order_id: str


@event("tests.stock.reserve")
@dataclass(frozen=True)
class ReserveStock:
    order_id: str


@event("tests.counter.tick")
@dataclass(frozen=True)
class Tick:
    counter_id: str
    n: int = 0


@event("tests.single.ping")
@dataclass(frozen=True)
class Ping:
    note: str = ""


@event("tests.async.started")
@dataclass(frozen=True)
class AsyncStarted:
    job_id: str


@event("tests.keyed.bad")
@dataclass(frozen=True)
class BadKeyEvent:
    number: int


@event("tests.failing.started")
@dataclass(frozen=True)
class FailingStarted:
    job_id: str
    fail: bool = True


@event("tests.failing.next")
@dataclass(frozen=True)
class FailingNext:
    job_id: str
    tags: list[str] = field(default_factory=list)


@event("tests.quote.sent")
@dataclass(frozen=True)
class QuoteSent:
    quote_id: str


@event("tests.quote.accepted")
@dataclass(frozen=True)
class QuoteAccepted:
    quote_id: str


@event("tests.quote.withdrawn")
@dataclass(frozen=True)
class QuoteWithdrawn:
    quote_id: str


@event("tests.quote.follow-up-due")
@dataclass(frozen=True)
class QuoteFollowUpDue:
    quote_id: str


@event("tests.quote.callback-due")
@dataclass(frozen=True)
class QuoteCallbackDue:
    quote_id: str


@event("tests.task.opened")
@dataclass(frozen=True)
class TaskOpened:
    task_id: str
    nudge_after_seconds: int = 3600
    calendar: str | None = None


@event("tests.task.nudge-due")
@dataclass(frozen=True)
class NudgeDue:
    task_id: str


@event("tests.task.closed")
@dataclass(frozen=True)
class TaskClosed:
    task_id: str


@event("tests.task.escalate")
@dataclass(frozen=True)
class Escalate:
    task_id: str


@event("tests.deadline.transfer-requested")
@dataclass(frozen=True)
class TransferRequested:
    transfer_id: str


@event("tests.deadline.debited")
@dataclass(frozen=True)
class Debited:
    transfer_id: str


@event("tests.deadline.compensate")
@dataclass(frozen=True)
class CompensationRequested:
    transfer_id: str
