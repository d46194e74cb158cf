"""Events of the delayed-message, timer-never-starts and deadline-propagation flows
(tests/testapp/delayed_flows.py)."""

from __future__ import annotations

from dataclasses import dataclass

from bsft_saga import event

# --- InvoiceFlow: a delayed message instead of a timer -----------------------------------


@event("tests.delayed.invoice-issued")
@dataclass(frozen=True)
class InvoiceIssued:
    invoice_id: str


@event("tests.delayed.invoice-paid")
@dataclass(frozen=True)
class InvoicePaid:
    invoice_id: str


@event("tests.delayed.invoice-reminder-due")
@dataclass(frozen=True)
class InvoiceReminderDue:
    """Published by InvoiceFlow's first step as a delayed message."""

    invoice_id: str


@event("tests.delayed.subscription-ended")
@dataclass(frozen=True)
class SubscriptionEnded:
    """Published from outside any saga, at the end of the paid period; plain receivers."""

    subscription_id: str


# --- CaseFlow and the flows around its timer ---------------------------------------------


@event("tests.delayed.case-opened")
@dataclass(frozen=True)
class CaseOpened:
    case_id: str


@event("tests.delayed.chase-due")
@dataclass(frozen=True)
class ChaseDue:
    """CaseFlow's timer event; ChaseAuditFlow starts with it, ChaseWatchFlow awaits it."""

    case_id: str


@event("tests.delayed.case-closed")
@dataclass(frozen=True)
class CaseClosed:
    case_id: str


@event("tests.delayed.watch-started")
@dataclass(frozen=True)
class WatchStarted:
    case_id: str


# --- ShipmentFlow and PriceCheckFlow: deadlines from the first event ---------------------


@event("tests.delayed.shipment-booked")
@dataclass(frozen=True)
class ShipmentBooked:
    shipment_id: str
    express: bool = False


@event("tests.delayed.carrier-requested")
@dataclass(frozen=True)
class CarrierRequested:
    shipment_id: str


@event("tests.delayed.shipment-delivered")
@dataclass(frozen=True)
class ShipmentDelivered:
    shipment_id: str


@event("tests.delayed.price-check-requested")
@dataclass(frozen=True)
class PriceCheckRequested:
    check_id: str


@event("tests.delayed.supplier-asked")
@dataclass(frozen=True)
class SupplierAsked:
    check_id: str


@event("tests.delayed.supplier-answered")
@dataclass(frozen=True)
class SupplierAnswered:
    check_id: str
