"""Flows that keep early events: a chain of keeping steps, and a wait that keeps an event
arriving before its saga starts (tests/kept/test_kept_events_delivery.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from bsft_saga import SagaContext, SagaFlow
from bsft_saga.flows import SagaBuilderFactory
from tests.testapp.kept_events import Gate, InvoiceIssued, Item, Opened, PaymentReceived

#: Keys whose failing items raise (a test clears it to "fix the cause").
FAILING: set[str] = set()
#: What taking an item of a key also does (a test's side effect: publish another event).
ON_TAKE: dict[str, Callable[[], object]] = {}


@dataclass
class ChainState:
    items: list[int] = field(default_factory=list)


def _take(ctx: SagaContext[ChainState], e: Item) -> None:
    if e.fail and e.key in FAILING:
        raise RuntimeError(f"item {e.n} of {e.key} cannot be taken")
    ctx.state.items.append(e.n)
    if e.key in ON_TAKE:
        ON_TAKE[e.key]()


class ChainFlow(SagaFlow):
    """Two waits in a row keep the same type: both kept items are applied, oldest first."""

    saga_type = "tests.kept.chain"

    def configure(self, factory: SagaBuilderFactory) -> None:
        (
            factory.with_state(ChainState)
            .start_with(Opened, key=lambda e: e.key)
            .wait_for(Gate, key=lambda e: e.key)
            .wait_for(Item, key=lambda e: e.key, keep_early=True)
            .then(_take)
            .wait_for(Item, key=lambda e: e.key, keep_early=True)
            .then(_take)
            .complete()
        )


@dataclass
class InvoiceState:
    paid: bool = False


def _paid(ctx: SagaContext[InvoiceState], e: PaymentReceived) -> None:
    ctx.state.paid = True


class InvoiceFlow(SagaFlow):
    """The payment may arrive a moment before the invoice (a deferred start event)."""

    saga_type = "tests.kept.invoice"

    def configure(self, factory: SagaBuilderFactory) -> None:
        (
            factory.with_state(InvoiceState)
            .start_with(InvoiceIssued, key=lambda e: e.invoice_id)
            .wait_for(PaymentReceived, key=lambda e: e.invoice_id, keep_early=True)
            .then(_paid)
            .complete()
        )


FLOWS: list[type[SagaFlow]] = [ChainFlow, InvoiceFlow]
