"""The events of the sample shop: quotes, orders, and the warehouse's and payments' replies.

Type names are persisted with timers and outbox rows: never rename one that has shipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from bsft_saga import event

# -- quotes ---------------------------------------------------------------------------------


@event("quotes.sent")
@dataclass(frozen=True)
class QuoteSent:
    quote_id: str
    customer: str = ""


@event("quotes.accepted")
@dataclass(frozen=True)
class QuoteAccepted:
    quote_id: str


@event("quotes.withdrawn")
@dataclass(frozen=True)
class QuoteWithdrawn:
    quote_id: str


@event("quotes.follow-up-due")
@dataclass(frozen=True)
class QuoteFollowUpDue:
    """Published by the quote's ``followup`` timer: time to send a follow-up e-mail."""

    quote_id: str


@event("quotes.callback-due")
@dataclass(frozen=True)
class QuoteCallbackDue:
    """Published by the quote's ``callback`` timer: time for sales to phone the customer."""

    quote_id: str


# -- orders ---------------------------------------------------------------------------------


@event("orders.placed")
@dataclass(frozen=True)
class OrderPlaced:
    order_id: str
    total: Decimal


@event("orders.payment-received")
@dataclass(frozen=True)
class PaymentReceived:
    order_id: str
    amount: Decimal


@event("orders.payment-overdue")
@dataclass(frozen=True)
class PaymentOverdue:
    """Published by the order's ``payment`` timer when no payment arrived in time."""

    order_id: str


@event("orders.shipped")
@dataclass(frozen=True)
class OrderShipped:
    order_id: str


@event("orders.canceled")
@dataclass(frozen=True)
class OrderCanceled:
    order_id: str
    reason: str


# -- warehouse ------------------------------------------------------------------------------


@event("warehouse.reserve-stock")
@dataclass(frozen=True)
class ReserveStock:
    """A command to the warehouse, published by the order saga."""

    order_id: str


@event("warehouse.stock-reserved")
@dataclass(frozen=True)
class StockReserved:
    order_id: str


@event("warehouse.release-stock")
@dataclass(frozen=True)
class ReleaseStock:
    """Compensation: give back what ``ReserveStock`` took."""

    order_id: str
