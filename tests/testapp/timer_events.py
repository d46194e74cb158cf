"""Events of the timer, harness and deadline test flows (tests/testapp/timer_flows.py).

The quote, task and transfer events the older flows use live in tests/testapp/events.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from bsft_saga import event

# --- ProbeFlow: step bodies chosen by the test ---------------------------------------


@event("tests.timers.probe-started")
@dataclass(frozen=True)
class ProbeStarted:
    """Starts a ProbeFlow instance; its body runs the test's action named ``action``."""

    probe_id: str
    action: str = ""


@event("tests.timers.probe-poked")
@dataclass(frozen=True)
class ProbePoked:
    """Wakes the next step of a ProbeFlow instance (sent by a test or by a timer)."""

    probe_id: str
    action: str = ""


@event("tests.timers.probe-due")
@dataclass(frozen=True)
class ProbeDue:
    """A reminder no ProbeFlow step awaits: only plain receivers react to it."""

    probe_id: str
    label: str = ""


@event("tests.timers.one-shot-requested")
@dataclass(frozen=True)
class OneShotRequested:
    """Starts OneShotFlow, whose only step schedules a timer and auto-completes."""

    job_id: str


# --- OfferFlow: a follow-up that wakes the saga itself -------------------------------


@event("tests.timers.offer-sent")
@dataclass(frozen=True)
class OfferSent:
    offer_id: str


@event("tests.timers.offer-follow-up-due")
@dataclass(frozen=True)
class OfferFollowUpDue:
    offer_id: str


@event("tests.timers.offer-last-call-due")
@dataclass(frozen=True)
class OfferLastCallDue:
    offer_id: str


@event("tests.timers.offer-accepted")
@dataclass(frozen=True)
class OfferAccepted:
    offer_id: str


# --- PaymentFlow: a deadline that travels with the saga's events -----------------------


@event("tests.timers.payment-requested")
@dataclass(frozen=True)
class PaymentRequested:
    payment_id: str
    amount: Decimal = Decimal("10.00")
    # Fault injection for the atomicity test: the saga's on_expired raises.
    fail_on_expiry: bool = False


@event("tests.timers.debit-requested")
@dataclass(frozen=True)
class DebitRequested:
    payment_id: str
    amount: Decimal = Decimal("0")


@event("tests.timers.payment-debited")
@dataclass(frozen=True)
class PaymentDebited:
    payment_id: str


@event("tests.timers.debit-failed")
@dataclass(frozen=True)
class DebitFailed:
    payment_id: str
    reason: str = ""


@event("tests.timers.credit-requested")
@dataclass(frozen=True)
class CreditRequested:
    payment_id: str
    amount: Decimal = Decimal("0")


@event("tests.timers.payment-credited")
@dataclass(frozen=True)
class PaymentCredited:
    payment_id: str


@event("tests.timers.credit-failed")
@dataclass(frozen=True)
class CreditFailed:
    payment_id: str
    reason: str = ""


@event("tests.timers.refund-requested")
@dataclass(frozen=True)
class RefundRequested:
    payment_id: str
    amount: Decimal = Decimal("0")


# --- ChecklistFlow: a deadline next to ordinary timers ---------------------------------


@event("tests.timers.checklist-opened")
@dataclass(frozen=True)
class ChecklistOpened:
    checklist_id: str


@event("tests.timers.checklist-reminder-due")
@dataclass(frozen=True)
class ChecklistReminderDue:
    checklist_id: str


@event("tests.timers.checklist-reset")
@dataclass(frozen=True)
class ChecklistReset:
    checklist_id: str


@event("tests.timers.checklist-done")
@dataclass(frozen=True)
class ChecklistDone:
    checklist_id: str
