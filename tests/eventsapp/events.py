"""Events of an app with no flows and no receivers in this process: only bsft_saga's
autodiscovery in ``ready()`` imports this module."""

from __future__ import annotations

from dataclasses import dataclass

from bsft_saga import event


@event("tests.eventsapp.invoice-overdue")
@dataclass(frozen=True)
class InvoiceOverdue:
    invoice_id: str
