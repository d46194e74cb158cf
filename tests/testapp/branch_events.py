"""Events of the flows that keep early events and run bodies meanwhile
(tests/testapp/branch_flows.py)."""

from __future__ import annotations

from dataclasses import dataclass

from bsft_saga import event


@event("tests.branch.order-accepted")
@dataclass(frozen=True)
class OrderAccepted:
    order_id: str


@event("tests.branch.payment-authorised")
@dataclass(frozen=True)
class PaymentAuthorised:
    order_id: str


@event("tests.branch.parcel-packed")
@dataclass(frozen=True)
class ParcelPacked:
    order_id: str
    parcel: str = ""


@event("tests.branch.order-withdrawn")
@dataclass(frozen=True)
class OrderWithdrawn:
    order_id: str


@event("tests.branch.parcel-delivered")
@dataclass(frozen=True)
class ParcelDelivered:
    order_id: str


@event("tests.branch.note-added")
@dataclass(frozen=True)
class NoteAdded:
    order_id: str
    text: str = ""


@event("tests.invoice-issued")
@dataclass(frozen=True)
class InvoiceIssued:
    invoice_id: str


@event("tests.invoice-paid")
@dataclass(frozen=True)
class InvoicePaid:
    invoice_id: str


@event("tests.payment-reminder-due")
@dataclass(frozen=True)
class PaymentReminderDue:
    invoice_id: str


@event("tests.payment-reminder-sent")
@dataclass(frozen=True)
class PaymentReminderSent:
    invoice_id: str
    reminder: int
