"""The sample shop's two sagas.

``QuoteFlow`` -- a quote waits for the customer's answer; meanwhile two business-day
reminders (a follow-up e-mail after 2 Berlin business days, a call-back after 3) fire into
plain receivers (``receivers.py``). The answer, whichever comes first, cancels the reminders
still pending: they are step-scoped timers of the wait the answer ends.

``OrderFulfillmentFlow`` -- an order asks the warehouse to reserve stock (through the
outbox: the command is delivered only once the order's step committed), then waits one day
for the payment. A payment ends the wait and cancels the timer; no payment lets the timer's
``PaymentOverdue`` wake the same step, which cancels the order and releases the stock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

from bsft_saga import SagaFlow
from sample_project.orders.events import (
    OrderCanceled,
    OrderPlaced,
    OrderShipped,
    PaymentOverdue,
    PaymentReceived,
    QuoteAccepted,
    QuoteCallbackDue,
    QuoteFollowUpDue,
    QuoteSent,
    QuoteWithdrawn,
    ReleaseStock,
    ReserveStock,
    StockReserved,
)

#: Business days, counted in the "berlin" calendar of ``BSFT_SAGA["CALENDARS"]``.
FOLLOW_UP_AFTER = timedelta(days=2)
CALL_BACK_AFTER = timedelta(days=3)
#: Wall-clock time a customer has to pay once the stock is reserved.
PAYMENT_WINDOW = timedelta(days=1)

# -- quotes ---------------------------------------------------------------------------------


@dataclass
class QuoteState:
    customer: str = ""
    accepted: bool = False
    withdrawn: bool = False


def schedule_reminders(ctx: Any, e: QuoteSent) -> None:
    ctx.state.customer = e.customer
    ctx.schedule_timeout(
        "followup", FOLLOW_UP_AFTER, QuoteFollowUpDue(e.quote_id), calendar="berlin"
    )
    ctx.schedule_timeout(
        "callback", CALL_BACK_AFTER, QuoteCallbackDue(e.quote_id), calendar="berlin"
    )


def record_answer(ctx: Any, e: QuoteAccepted | QuoteWithdrawn) -> None:
    ctx.state.accepted = isinstance(e, QuoteAccepted)
    ctx.state.withdrawn = isinstance(e, QuoteWithdrawn)


class QuoteFlow(SagaFlow):
    """Remind sales to follow a quote up until the customer accepts or withdraws it."""

    saga_type = "quotes.follow-up"

    def configure(self, factory: Any) -> None:
        (
            factory.with_state(QuoteState)
            .start_with(QuoteSent, key=lambda e: e.quote_id)
            .then(schedule_reminders)
            .wait_for(QuoteAccepted, key=lambda e: e.quote_id)
            .or_(QuoteWithdrawn, key=lambda e: e.quote_id)
            .then(record_answer)
            .complete()
        )


# -- orders ---------------------------------------------------------------------------------


@dataclass
class OrderState:
    total: Decimal = Decimal("0")
    paid: Decimal = Decimal("0")
    status: str = "placed"
    cancel_reason: str = ""


def reserve_stock(ctx: Any, e: OrderPlaced) -> None:
    ctx.state.total = e.total
    ctx.publish(ReserveStock(e.order_id))


def await_payment(ctx: Any, e: StockReserved) -> None:
    ctx.state.status = "reserved"
    ctx.schedule_timeout("payment", PAYMENT_WINDOW, PaymentOverdue(e.order_id))


def is_payment(ctx: Any, e: PaymentReceived | PaymentOverdue) -> bool:
    return isinstance(e, PaymentReceived)


def record_payment(ctx: Any, e: PaymentReceived) -> None:
    ctx.state.paid = e.amount
    ctx.state.status = "paid"


def cancel_unpaid_order(ctx: Any, e: PaymentOverdue) -> None:
    ctx.state.status = "canceled"
    ctx.state.cancel_reason = f"no payment within {PAYMENT_WINDOW.days} day"
    # Compensation: give the stock back, and tell whoever cares.
    ctx.publish(ReleaseStock(e.order_id))
    ctx.publish(OrderCanceled(e.order_id, reason=ctx.state.cancel_reason))
    ctx.mark_complete()


def record_shipment(ctx: Any, e: OrderShipped) -> None:
    ctx.state.status = "shipped"


class OrderFulfillmentFlow(SagaFlow):
    """Reserve stock, take the payment (or cancel after a day without one), ship."""

    saga_type = "orders.fulfilment"

    def configure(self, factory: Any) -> None:
        (
            factory.with_state(OrderState)
            .start_with(OrderPlaced, key=lambda e: e.order_id)
            .then(reserve_stock)
            .wait_for(StockReserved, key=lambda e: e.order_id)
            .then(await_payment)
            .wait_for(PaymentReceived, key=lambda e: e.order_id)
            .or_(PaymentOverdue, key=lambda e: e.order_id)
            .when(is_payment, record_payment)
            .when_not(is_payment, cancel_unpaid_order)
            .wait_for(OrderShipped, key=lambda e: e.order_id)
            .then(record_shipment)
            .complete()
        )
