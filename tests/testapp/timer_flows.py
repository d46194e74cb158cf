"""Flows exercised by the timer tests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.core.cache import cache

from bsft_saga import Envelope, SagaFlow, deadline_exceeded, publish
from bsft_saga.correlation import get_correlation_id
from bsft_saga.models import SagaInstance, SagaTimeout
from bsft_saga.signals import event_published
from tests.testapp.events import (
    CompensationRequested,
    Debited,
    Escalate,
    NudgeDue,
    QuoteAccepted,
    QuoteCallbackDue,
    QuoteFollowUpDue,
    QuoteSent,
    QuoteWithdrawn,
    TaskClosed,
    TaskOpened,
    TransferRequested,
)
from tests.testapp.timer_events import (
    ChecklistDone,
    ChecklistOpened,
    ChecklistReminderDue,
    ChecklistReset,
    CreditFailed,
    CreditRequested,
    DebitFailed,
    DebitRequested,
    OfferAccepted,
    OfferFollowUpDue,
    OfferLastCallDue,
    OfferSent,
    OneShotRequested,
    PaymentCredited,
    PaymentDebited,
    PaymentRequested,
    ProbeDue,
    ProbePoked,
    ProbeStarted,
    RefundRequested,
)


@dataclass
class QuoteState:
    accepted: bool = False
    withdrawn: bool = False


def _schedule_reminders(ctx: Any, e: QuoteSent) -> None:
    ctx.schedule_timeout("followup", timedelta(days=2), QuoteFollowUpDue(e.quote_id))
    ctx.schedule_timeout("callback", timedelta(days=3), QuoteCallbackDue(e.quote_id))


def _decide(ctx: Any, e: QuoteAccepted | QuoteWithdrawn) -> None:
    ctx.state.accepted = isinstance(e, QuoteAccepted)
    ctx.state.withdrawn = isinstance(e, QuoteWithdrawn)


class QuoteFlow(SagaFlow):
    """Reminders go to plain receivers; the saga itself awaits the customer's answer."""

    saga_type = "tests.quote"

    def configure(self, factory: Any) -> None:
        (
            factory.with_state(QuoteState)
            .start_with(QuoteSent, key=lambda e: e.quote_id)
            .then(_schedule_reminders)
            .wait_for(QuoteAccepted, key=lambda e: e.quote_id)
            .or_(QuoteWithdrawn, key=lambda e: e.quote_id)
            .then(_decide)
            .complete()
        )


@dataclass
class TaskState:
    nudged: int = 0
    closed: bool = False
    escalations: int = 0


def _open(ctx: Any, e: TaskOpened) -> None:
    ctx.schedule_timeout(
        "nudge", timedelta(seconds=e.nudge_after_seconds), NudgeDue(e.task_id), calendar=e.calendar
    )
    ctx.schedule_timeout("escalate", timedelta(days=7), Escalate(e.task_id), scope="saga")


def _nudged(ctx: Any, e: NudgeDue) -> None:
    ctx.state.nudged += 1


class TaskFlow(SagaFlow):
    """Its own timer wakes its next step (the timer is stamped in the step's commit)."""

    saga_type = "tests.task"

    def configure(self, factory: Any) -> None:
        (
            factory.with_state(TaskState)
            .start_with(TaskOpened, key=lambda e: e.task_id)
            .then(_open)
            .wait_for(NudgeDue, key=lambda e: e.task_id)
            .then(_nudged)
            .wait_for(TaskClosed, key=lambda e: e.task_id)
            .then(lambda ctx, e: setattr(ctx.state, "closed", True))
            .complete()
        )


@dataclass
class TransferState:
    debited: bool = False
    expired_at_step: int = -1
    history: list[str] = field(default_factory=list)


def _expired(ctx: Any, e: Any) -> None:
    ctx.state.history.append("expired")
    if ctx.state.debited:
        ctx.publish(CompensationRequested(ctx.correlation_key), ignore_deadline=True)
    ctx.mark_complete()


class TransferFlow(SagaFlow):
    saga_type = "tests.transfer"

    def configure(self, factory: Any) -> None:
        (
            factory.with_state(TransferState)
            .with_deadline(timedelta(minutes=30), on_expired=_expired)
            .start_with(TransferRequested, key=lambda e: e.transfer_id)
            .then(lambda ctx, e: ctx.state.history.append("requested"))
            .wait_for(Debited, key=lambda e: e.transfer_id)
            .then(lambda ctx, e: setattr(ctx.state, "debited", True))
            .wait_for(TaskClosed, key=lambda e: e.task_id)
            .complete()
        )


# --- ProbeFlow ------------------------------------------------------------------------

ProbeAction = Callable[[Any, Any], None]

#: ProbeFlow's step bodies by name. A test registers its own with
#: ``monkeypatch.setitem(PROBE_ACTIONS, name, body)`` and names it in the event's ``action``.
PROBE_ACTIONS: dict[str, ProbeAction] = {}

#: How many ProbePoked steps follow the start step.
PROBE_WAITS = 6


@dataclass
class ProbeState:
    actions: list[str] = field(default_factory=list)


def _probe_step(ctx: Any, e: ProbeStarted | ProbePoked) -> None:
    ctx.state.actions.append(e.action or "-")
    if e.action:
        PROBE_ACTIONS[e.action](ctx, e)


def schedule_probe_due(
    name: str, when: timedelta | datetime, *, label: str = "", **kwargs: Any
) -> ProbeAction:
    """A ProbeFlow step body that schedules ``ProbeDue(probe_id, label)`` under ``name``."""

    def body(ctx: Any, e: ProbeStarted | ProbePoked) -> None:
        ctx.schedule_timeout(name, when, ProbeDue(e.probe_id, label), **kwargs)

    return body


class ProbeFlow(SagaFlow):
    """A saga whose every step runs a body the test supplies; it never completes by itself.

    Step 0 is ``ProbeStarted``, steps 1..PROBE_WAITS are ``ProbePoked``; a body completes
    the saga with ``ctx.mark_complete()``.
    """

    saga_type = "tests.timers.probe"

    def configure(self, factory: Any) -> None:
        builder = (
            factory.with_state(ProbeState)
            .start_with(ProbeStarted, key=lambda e: e.probe_id)
            .then(_probe_step)
        )
        for _ in range(PROBE_WAITS):
            builder.wait_for(ProbePoked, key=lambda e: e.probe_id).then(_probe_step)
        builder.build()


def _schedule_too_late(ctx: Any, e: OneShotRequested) -> None:
    ctx.schedule_timeout("too-late", timedelta(hours=1), ProbeDue(e.job_id))


class OneShotFlow(SagaFlow):
    """One step that schedules a timer and, being the last step, completes the saga."""

    saga_type = "tests.timers.one-shot"

    def configure(self, factory: Any) -> None:
        (
            factory.stateless()
            .start_with(OneShotRequested, key=lambda e: e.job_id)
            .then(_schedule_too_late)
            .complete()
        )


# --- OfferFlow (docs/testing.md) -------------------------------------------------------


@dataclass
class OfferState:
    followed_up: bool = False
    followed_up_at: datetime | None = None
    last_call_at: datetime | None = None
    accepted: bool = False


def _send_offer(ctx: Any, e: OfferSent) -> None:
    ctx.schedule_timeout("followup", timedelta(days=2), OfferFollowUpDue(e.offer_id))


def _first_answer(ctx: Any, e: OfferFollowUpDue | OfferAccepted) -> None:
    if isinstance(e, OfferAccepted):
        ctx.state.accepted = True
        ctx.mark_complete()
        return
    ctx.state.followed_up = True
    ctx.state.followed_up_at = ctx.now
    ctx.schedule_timeout("last-call", timedelta(days=2), OfferLastCallDue(e.offer_id))


def _second_answer(ctx: Any, e: OfferAccepted | OfferLastCallDue) -> None:
    if isinstance(e, OfferAccepted):
        ctx.state.accepted = True
    else:
        ctx.state.last_call_at = ctx.now


class OfferFlow(SagaFlow):
    """Its follow-up timer wakes a step of the saga itself (the docs' harness example)."""

    saga_type = "tests.timers.offer"

    def configure(self, factory: Any) -> None:
        (
            factory.with_state(OfferState)
            .start_with(OfferSent, key=lambda e: e.offer_id)
            .then(_send_offer)
            .wait_for(OfferFollowUpDue, key=lambda e: e.offer_id)
            .or_(OfferAccepted, key=lambda e: e.offer_id)
            .then(_first_answer)
            .wait_for(OfferAccepted, key=lambda e: e.offer_id)
            .or_(OfferLastCallDue, key=lambda e: e.offer_id)
            .then(_second_answer)
            .complete()
        )


# --- PaymentFlow and its account service (docs/deadlines.md) -------------------------

PAYMENT_BUDGET = timedelta(minutes=30)


@dataclass
class PaymentState:
    debited: bool = False
    credited: bool = False
    failed: bool = False
    expired: bool = False
    refunded: bool = False
    fail_on_expiry: bool = False


class ExpiryFailed(RuntimeError):
    """Raised by PaymentFlow's on_expired when the test asked it to fail."""


def _request_debit(ctx: Any, e: PaymentRequested) -> None:
    ctx.state.fail_on_expiry = e.fail_on_expiry
    ctx.publish(DebitRequested(e.payment_id, e.amount))


def _debit_answered(ctx: Any, e: PaymentDebited | DebitFailed) -> None:
    if isinstance(e, DebitFailed):
        ctx.state.failed = True
        ctx.mark_complete()
        return
    ctx.state.debited = True
    ctx.publish(CreditRequested(e.payment_id))


def _credit_answered(ctx: Any, e: PaymentCredited | CreditFailed) -> None:
    if isinstance(e, CreditFailed):
        ctx.state.failed = True
        ctx.state.refunded = True
        ctx.publish(RefundRequested(e.payment_id), ignore_deadline=True)
    else:
        ctx.state.credited = True


def _payment_expired(ctx: Any, e: Any) -> None:
    if ctx.state.fail_on_expiry:
        raise ExpiryFailed(f"on_expired of {ctx.correlation_key} failed")
    ctx.state.expired = True
    if ctx.state.debited:
        # A refund must run however late it is: compensation ignores the deadline.
        ctx.state.refunded = True
        ctx.publish(RefundRequested(ctx.correlation_key), ignore_deadline=True)
    ctx.mark_complete()


class PaymentFlow(SagaFlow):
    """Debit, then credit, within PAYMENT_BUDGET; on expiry a debited payment is refunded."""

    saga_type = "tests.timers.payment"

    def configure(self, factory: Any) -> None:
        (
            factory.with_state(PaymentState)
            .with_deadline(PAYMENT_BUDGET, on_expired=_payment_expired)
            .start_with(PaymentRequested, key=lambda e: e.payment_id)
            .then(_request_debit)
            .wait_for(PaymentDebited, key=lambda e: e.payment_id)
            .or_(DebitFailed, key=lambda e: e.payment_id)
            .then(_debit_answered)
            .wait_for(PaymentCredited, key=lambda e: e.payment_id)
            .or_(CreditFailed, key=lambda e: e.payment_id)
            .then(_credit_answered)
            .complete()
        )


# --- ChecklistFlow ---------------------------------------------------------------------

CHECKLIST_BUDGET = timedelta(hours=8)


@dataclass
class ChecklistState:
    resets: int = 0
    expired: bool = False


def _open_checklist(ctx: Any, e: ChecklistOpened) -> None:
    # Due after the deadline: it only fires if the deadline did not complete the saga.
    ctx.schedule_timeout(
        "remind", timedelta(days=1), ChecklistReminderDue(e.checklist_id), scope="saga"
    )


def _reset_or_done(ctx: Any, e: ChecklistReset | ChecklistDone) -> None:
    if isinstance(e, ChecklistDone):
        ctx.mark_complete()
        return
    ctx.state.resets += 1
    ctx.cancel_all_timeouts()


def _checklist_expired(ctx: Any, e: Any) -> None:
    ctx.state.expired = True
    ctx.mark_complete()


class ChecklistFlow(SagaFlow):
    """A deadline next to an ordinary saga-scoped timer, and a step that cancels all timers."""

    saga_type = "tests.timers.checklist"

    def configure(self, factory: Any) -> None:
        (
            factory.with_state(ChecklistState)
            .with_deadline(CHECKLIST_BUDGET, on_expired=_checklist_expired)
            .start_with(ChecklistOpened, key=lambda e: e.checklist_id)
            .then(_open_checklist)
            .wait_for(ChecklistReset, key=lambda e: e.checklist_id)
            .or_(ChecklistDone, key=lambda e: e.checklist_id)
            .then(_reset_or_done)
            .wait_for(ChecklistDone, key=lambda e: e.checklist_id)
            .complete()
        )


@dataclass
class Ledger:
    """The account service of the deadline tests: plain receivers that refuse late work.

    ``credit``: how it answers a CreditRequested — ``"credit"``, ``"fail"``, or ``"silent"``
    (never answers, so the saga waits until its deadline).
    """

    credit: str = "credit"
    debits: list[str] = field(default_factory=list)
    credits: list[str] = field(default_factory=list)
    refunds: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    envelopes: list[Envelope] = field(default_factory=list)

    def on_debit_requested(self, sender: type, *, envelope: Envelope, **kwargs: Any) -> None:
        self.envelopes.append(envelope)
        payment_id = envelope.event.payment_id
        if deadline_exceeded(envelope):
            self.refused.append(payment_id)
            publish(DebitFailed(payment_id, reason="deadline exceeded"))
            return
        self.debits.append(payment_id)
        publish(PaymentDebited(payment_id))

    def on_credit_requested(self, sender: type, *, envelope: Envelope, **kwargs: Any) -> None:
        self.envelopes.append(envelope)
        payment_id = envelope.event.payment_id
        if self.credit == "silent":
            return
        if self.credit == "fail" or deadline_exceeded(envelope):
            publish(CreditFailed(payment_id, reason="credit refused"))
            return
        self.credits.append(payment_id)
        publish(PaymentCredited(payment_id))

    def on_refund_requested(self, sender: type, *, envelope: Envelope, **kwargs: Any) -> None:
        # Compensation: no deadline check, a refund always runs.
        self.envelopes.append(envelope)
        self.refunds.append(envelope.event.payment_id)

    def connect(self) -> None:
        event_published.connect(self.on_debit_requested, sender=DebitRequested, weak=False)
        event_published.connect(self.on_credit_requested, sender=CreditRequested, weak=False)
        event_published.connect(self.on_refund_requested, sender=RefundRequested, weak=False)

    def disconnect(self) -> None:
        event_published.disconnect(self.on_debit_requested, sender=DebitRequested)
        event_published.disconnect(self.on_credit_requested, sender=CreditRequested)
        event_published.disconnect(self.on_refund_requested, sender=RefundRequested)


#: What ``send_follow_up_mail`` "sent": the quote ids, in order.
MAILBOX: list[str] = []


def mail_quote_owner(quote_id: str) -> None:
    MAILBOX.append(quote_id)


def send_follow_up_mail(sender: type, *, envelope: Envelope, **kwargs: Any) -> None:
    """The idempotent receiver of docs/timeouts.md: one mail per timer, however often its
    event is delivered."""
    if not cache.add(f"follow-up-mail:{envelope.message_id}", True, timeout=None):
        return  # seen before: timer events reach plain receivers at least once
    mail_quote_owner(envelope.event.quote_id)


class Recorder:
    """A plain receiver of ``event_published`` that records some event classes, in order.

    Set ``fail_with`` to make it raise that exception for the envelopes ``fail_if`` selects
    (all of them by default), as a receiver whose service is down would.
    """

    def __init__(self, *event_classes: type) -> None:
        self.event_classes = event_classes
        self.envelopes: list[Envelope] = []
        self.ambient_correlation_ids: list[str | None] = []
        self.fail_with: BaseException | None = None
        self.fail_if: Callable[[Envelope], bool] = lambda envelope: True

    def __call__(self, sender: type, *, envelope: Envelope, **kwargs: Any) -> None:
        self.envelopes.append(envelope)
        self.ambient_correlation_ids.append(get_correlation_id())
        if self.fail_with is not None and self.fail_if(envelope):
            raise self.fail_with

    @property
    def events(self) -> list[Any]:
        return [envelope.event for envelope in self.envelopes]

    def connect(self) -> Recorder:
        for event_class in self.event_classes:
            event_published.connect(self, sender=event_class, weak=False)
        return self

    def disconnect(self) -> None:
        for event_class in self.event_classes:
            event_published.disconnect(self, sender=event_class)


# --- lookups the timer tests share ------------------------------------------------------


def saga_of(flow: type[SagaFlow], key: str) -> SagaInstance | None:
    """The newest instance of ``flow`` for ``key``, complete or not."""
    return (
        SagaInstance.objects.for_key(flow.saga_type, key)
        .order_by("-created_at", "is_complete")
        .first()
    )


def the_saga(flow: type[SagaFlow], key: str) -> SagaInstance:
    """Like ``saga_of``, for a test that expects the instance to exist."""
    instance = saga_of(flow, key)
    assert instance is not None, f"no {flow.saga_type} instance for {key!r}"
    return instance


def timers_of(flow: type[SagaFlow], key: str) -> list[SagaTimeout]:
    """Every timer row of every instance of ``flow`` for ``key``, in insertion order."""
    return list(
        SagaTimeout.objects.filter(
            saga__saga_type=flow.saga_type, saga__correlation_key=key
        ).order_by("id")
    )


FLOWS: list[type[SagaFlow]] = [
    QuoteFlow,
    TaskFlow,
    TransferFlow,
    ProbeFlow,
    OneShotFlow,
    OfferFlow,
    PaymentFlow,
    ChecklistFlow,
]
