"""Flows beyond a straight line: a wait that keeps early events, and one that runs a body
meanwhile (docs/flows.md, tests/kept/test_kept_events.py, tests/flows/test_meanwhile.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from bsft_saga import SagaContext, SagaFlow
from bsft_saga.flows import SagaBuilderFactory
from tests.testapp.branch_events import (
    InvoiceIssued,
    InvoicePaid,
    NoteAdded,
    OrderAccepted,
    OrderWithdrawn,
    ParcelDelivered,
    ParcelPacked,
    PaymentAuthorised,
    PaymentReminderDue,
    PaymentReminderSent,
)


@dataclass
class FulfilmentState:
    log: list[str] = field(default_factory=list)


def _log(ctx: SagaContext[FulfilmentState], e: object) -> None:
    ctx.state.log.append(type(e).__name__)


class FulfilmentFlow(SagaFlow):
    """The warehouse may pack before the payment is authorised: the parcel is kept."""

    saga_type = "tests.fulfilment"

    def configure(self, factory: SagaBuilderFactory) -> None:
        (
            factory.with_state(FulfilmentState)
            .start_with(OrderAccepted, key=lambda e: e.order_id)
            .then(_log)
            .wait_for(PaymentAuthorised, key=lambda e: e.order_id)
            .then(_log)
            .wait_for(ParcelPacked, key=lambda e: e.order_id, keep_early=True)
            .or_(OrderWithdrawn, key=lambda e: e.order_id, keep_early=True)
            .then(_log)
            .when(lambda ctx, e: isinstance(e, OrderWithdrawn), lambda ctx, e: ctx.mark_complete())
            .wait_for(ParcelDelivered, key=lambda e: e.order_id)
            .then(_log)
            .meanwhile(
                NoteAdded, lambda ctx, e: ctx.state.log.append(e.text), key=lambda e: e.order_id
            )
            .complete()
        )


REMINDER_INTERVAL = timedelta(days=3)
MAX_REMINDERS = 5


@dataclass
class DunningState:
    reminders: int = 0
    paid: bool = False
    canceled: bool = False


def _schedule_reminder(ctx: SagaContext[DunningState], e: object) -> None:
    ctx.schedule_timeout(
        "remind",
        REMINDER_INTERVAL,
        PaymentReminderDue(ctx.correlation_key or ""),
        calendar="berlin",
    )


def _remind(ctx: SagaContext[DunningState], e: PaymentReminderDue) -> None:
    if ctx.state.reminders == MAX_REMINDERS:
        ctx.state.canceled = True
        ctx.mark_complete()
        return
    ctx.state.reminders += 1
    ctx.publish(PaymentReminderSent(e.invoice_id, ctx.state.reminders))
    _schedule_reminder(ctx, e)


class DunningFlow(SagaFlow):
    """Remind every three business days until paid, five times at most, then cancel."""

    saga_type = "tests.dunning"

    def configure(self, factory: SagaBuilderFactory) -> None:
        (
            factory.with_state(DunningState)
            .start_with(InvoiceIssued, key=lambda e: e.invoice_id)
            .then(_schedule_reminder)
            .wait_for(InvoicePaid, key=lambda e: e.invoice_id)
            .meanwhile(PaymentReminderDue, _remind, key=lambda e: e.invoice_id)
            .then(lambda ctx, e: setattr(ctx.state, "paid", True))
            .complete()
        )


FLOWS: list[type[SagaFlow]] = [FulfilmentFlow, DunningFlow]
