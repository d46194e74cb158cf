"""Events of the flows that keep early events on bad days (tests/testapp/kept_flows.py)."""

from __future__ import annotations

from dataclasses import dataclass

from bsft_saga import event


@event("tests.kept.opened")
@dataclass(frozen=True)
class Opened:
    key: str


@event("tests.kept.gate")
@dataclass(frozen=True)
class Gate:
    key: str


@event("tests.kept.item")
@dataclass(frozen=True)
class Item:
    key: str
    n: int = 0
    fail: bool = False  # its step body raises while FAILING holds the key


@event("tests.kept.invoice-issued")
@dataclass(frozen=True)
class InvoiceIssued:
    invoice_id: str


@event("tests.kept.payment-received")
@dataclass(frozen=True)
class PaymentReceived:
    invoice_id: str
