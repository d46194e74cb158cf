"""Flows of the delayed-message, timer-never-starts and deadline-propagation tests.

InvoiceFlow and ShipmentFlow are the examples of docs/timeouts.md and docs/deadlines.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from bsft_saga import SagaFlow
from tests.testapp.delayed_events import (
    CarrierRequested,
    CaseClosed,
    CaseOpened,
    ChaseDue,
    InvoiceIssued,
    InvoicePaid,
    InvoiceReminderDue,
    PriceCheckRequested,
    ShipmentBooked,
    ShipmentDelivered,
    SupplierAnswered,
    SupplierAsked,
    WatchStarted,
)

# --- InvoiceFlow: a delayed message instead of a timer -----------------------------------

REMINDER_DELAY = timedelta(days=14)


@dataclass
class InvoiceState:
    paid: bool = False
    reminded: bool = False


def _issue(ctx: Any, e: InvoiceIssued) -> None:
    ctx.publish(InvoiceReminderDue(e.invoice_id), delay=REMINDER_DELAY)


def _settle(ctx: Any, e: InvoicePaid | InvoiceReminderDue) -> None:
    ctx.state.paid = isinstance(e, InvoicePaid)
    ctx.state.reminded = isinstance(e, InvoiceReminderDue)


class InvoiceFlow(SagaFlow):
    """Paid, or reminded after REMINDER_DELAY: whichever comes first ends the saga."""

    saga_type = "tests.invoice"

    def configure(self, factory: Any) -> None:
        (
            factory.with_state(InvoiceState)
            .start_with(InvoiceIssued, key=lambda e: e.invoice_id)
            .then(_issue)
            .wait_for(InvoicePaid, key=lambda e: e.invoice_id)
            .or_(InvoiceReminderDue, key=lambda e: e.invoice_id)
            .then(_settle)
            .complete()
        )


# --- CaseFlow's timer, and the flows its event reaches -----------------------------------

CHASE_AFTER = timedelta(days=1)


@dataclass
class CaseState:
    chased: int = 0


def _open_case(ctx: Any, e: CaseOpened) -> None:
    ctx.schedule_timeout("chase", CHASE_AFTER, ChaseDue(e.case_id), scope="saga")


def _chased(ctx: Any, e: ChaseDue) -> None:
    ctx.state.chased += 1


class CaseFlow(SagaFlow):
    """Schedules a ChaseDue timer and awaits it, then the case's closing."""

    saga_type = "tests.delayed.case"

    def configure(self, factory: Any) -> None:
        (
            factory.with_state(CaseState)
            .start_with(CaseOpened, key=lambda e: e.case_id)
            .then(_open_case)
            .wait_for(ChaseDue, key=lambda e: e.case_id)
            .then(_chased)
            .wait_for(CaseClosed, key=lambda e: e.case_id)
            .complete()
        )


class ChaseAuditFlow(SagaFlow):
    """Starts with a ChaseDue that someone publishes; a timer's ChaseDue starts nothing."""

    saga_type = "tests.delayed.chase-audit"

    def configure(self, factory: Any) -> None:
        (
            factory.stateless()
            .start_with(ChaseDue, key=lambda e: e.case_id)
            .wait_for(CaseClosed, key=lambda e: e.case_id)
            .complete()
        )


@dataclass
class WatchState:
    chases_seen: int = 0


def _chase_seen(ctx: Any, e: ChaseDue) -> None:
    ctx.state.chases_seen += 1


class ChaseWatchFlow(SagaFlow):
    """Another saga waiting for the ChaseDue of a case: a timer's event reaches its wait."""

    saga_type = "tests.delayed.chase-watch"

    def configure(self, factory: Any) -> None:
        (
            factory.with_state(WatchState)
            .start_with(WatchStarted, key=lambda e: e.case_id)
            .wait_for(ChaseDue, key=lambda e: e.case_id)
            .then(_chase_seen)
            .complete()
        )


# --- ShipmentFlow: a budget computed from the start event --------------------------------

EXPRESS_BUDGET = timedelta(hours=4)
STANDARD_BUDGET = timedelta(days=2)


@dataclass
class ShipmentState:
    late: bool = False


def _shipment_budget(e: ShipmentBooked) -> timedelta:
    return EXPRESS_BUDGET if e.express else STANDARD_BUDGET


def _shipment_late(ctx: Any, e: Any) -> None:
    ctx.state.late = True
    ctx.mark_complete()


def _book_carrier(ctx: Any, e: ShipmentBooked) -> None:
    ctx.publish(CarrierRequested(e.shipment_id))


class ShipmentFlow(SagaFlow):
    """Express shipments get four hours, the others two days."""

    saga_type = "tests.shipment"

    def configure(self, factory: Any) -> None:
        (
            factory.with_state(ShipmentState)
            .with_deadline(_shipment_budget, on_expired=_shipment_late)
            .start_with(ShipmentBooked, key=lambda e: e.shipment_id)
            .then(_book_carrier)
            .wait_for(ShipmentDelivered, key=lambda e: e.shipment_id)
            .complete()
        )


# --- PriceCheckFlow: no deadline of its own ----------------------------------------------


def _ask_supplier(ctx: Any, e: PriceCheckRequested) -> None:
    ctx.publish(SupplierAsked(e.check_id))


class PriceCheckFlow(SagaFlow):
    """No with_deadline: the deadline of the event that starts it is the saga's."""

    saga_type = "tests.delayed.price-check"

    def configure(self, factory: Any) -> None:
        (
            factory.stateless()
            .start_with(PriceCheckRequested, key=lambda e: e.check_id)
            .then(_ask_supplier)
            .wait_for(SupplierAnswered, key=lambda e: e.check_id)
            .complete()
        )


FLOWS = [InvoiceFlow, CaseFlow, ChaseAuditFlow, ChaseWatchFlow, ShipmentFlow, PriceCheckFlow]
