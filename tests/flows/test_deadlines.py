"""Deadlines: ``with_deadline(budget, on_expired=...)`` and ``deadline_exceeded(envelope)``
(docs/deadlines.md): a budget set when the saga starts travels with every event it causes.

TransferFlow (30 minutes) and PaymentFlow (30 minutes, with the Ledger as its account
service) live in tests/testapp/timer_flows.py. Transactional, because events a step
publishes are delivered after its commit.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import override_settings
from freezegun.api import FrozenDateTimeFactory

import bsft_saga
from bsft_saga import Envelope, publish
from bsft_saga.engine.deadlines import DEADLINE_TIMER_NAME, DeadlineExpired
from bsft_saga.events import TimerOrigin, event_type_of
from bsft_saga.models import SagaOutboxMessage, TimeoutOutcome
from bsft_saga.signals import event_published
from bsft_saga.testing import SagaHarness
from bsft_saga.timeouts import drain_due
from tests.support.timer_fixtures import T0
from tests.testapp.events import (
    CompensationRequested,
    Debited,
    QuoteSent,
    TaskClosed,
    TransferRequested,
)
from tests.testapp.timer_events import (
    ChecklistOpened,
    ChecklistReset,
    CreditFailed,
    CreditRequested,
    DebitRequested,
    PaymentRequested,
    ProbeStarted,
    RefundRequested,
)
from tests.testapp.timer_flows import (
    CHECKLIST_BUDGET,
    PAYMENT_BUDGET,
    ChecklistFlow,
    Ledger,
    PaymentFlow,
    ProbeFlow,
    QuoteFlow,
    Recorder,
    TransferFlow,
    the_saga,
    timers_of,
)

pytestmark = pytest.mark.django_db(transaction=True)

DEADLINE = T0 + timedelta(minutes=30)


@pytest.fixture
def compensations() -> Iterator[Recorder]:
    recorder = Recorder(CompensationRequested).connect()
    yield recorder
    recorder.disconnect()


@pytest.fixture
def ledger() -> Iterator[Ledger]:
    """The account service, answering credits; tests may switch ``ledger.credit``."""
    service = Ledger()
    service.connect()
    yield service
    service.disconnect()


def deadline_timer(flow: type, key: str) -> Any:
    return next(row for row in timers_of(flow, key) if row.name == DEADLINE_TIMER_NAME)


def envelope_with(
    deadline: datetime | None, event: Any = None, timer: TimerOrigin | None = None
) -> Envelope:
    event = DebitRequested("p-1") if event is None else event
    return Envelope(
        message_id=uuid.uuid4(),
        event=event,
        event_type=event_type_of(event),
        correlation_id=None,
        causation_id=None,
        deadline=deadline,
        published_at=T0,
        timer=timer,
    )


# --- the deadline is set at start and travels with the saga's events ------------------------


def test_with_deadline_sets_the_instance_deadline_to_start_plus_budget(clock: Any) -> None:
    publish(TransferRequested("tr-1"))

    assert the_saga(TransferFlow, "tr-1").deadline == DEADLINE


def test_a_flow_without_deadline_has_none(clock: Any) -> None:
    publish(QuoteSent("q-1"))

    assert the_saga(QuoteFlow, "q-1").deadline is None


def test_the_deadline_does_not_move_as_the_saga_advances(clock: FrozenDateTimeFactory) -> None:
    publish(TransferRequested("tr-1"))
    clock.tick(timedelta(minutes=10))

    publish(Debited("tr-1"))

    assert the_saga(TransferFlow, "tr-1").deadline == DEADLINE


def test_events_published_by_its_steps_carry_the_deadline(
    clock: FrozenDateTimeFactory, ledger: Ledger
) -> None:
    ledger.credit = "silent"

    publish(PaymentRequested("p-1"))

    saga = the_saga(PaymentFlow, "p-1")
    assert saga.deadline == T0 + PAYMENT_BUDGET
    assert [(type(e.event), e.deadline) for e in ledger.envelopes] == [
        (DebitRequested, saga.deadline),
        (CreditRequested, saga.deadline),
    ]


def test_the_saga_deadline_wins_over_the_deadline_of_the_event_that_woke_the_step(
    clock: FrozenDateTimeFactory, ledger: Ledger
) -> None:
    ledger.credit = "silent"

    publish(PaymentRequested("p-1"), deadline=T0 + timedelta(days=1))

    assert {e.deadline for e in ledger.envelopes} == {T0 + PAYMENT_BUDGET}


def test_the_deadline_timer_is_saga_scoped_and_survives_every_wait(
    clock: FrozenDateTimeFactory, ledger: Ledger
) -> None:
    ledger.credit = "silent"

    publish(PaymentRequested("p-1"))  # debit answered: the saga waits at step 2

    timer = deadline_timer(PaymentFlow, "p-1")
    assert the_saga(PaymentFlow, "p-1").step_index == 2
    assert (timer.scope, timer.due_at, timer.outcome) == ("saga", T0 + PAYMENT_BUDGET, None)


# --- at the deadline ----------------------------------------------------------------------


def test_an_instance_still_at_its_first_wait_runs_on_expired_at_the_deadline(
    clock: FrozenDateTimeFactory, compensations: Recorder
) -> None:
    publish(TransferRequested("tr-1"))
    clock.move_to(DEADLINE)

    assert drain_due().fired == 1

    saga = the_saga(TransferFlow, "tr-1")
    assert saga.state["history"] == ["requested", "expired"]
    assert (saga.is_complete, saga.completed_at) == (True, DEADLINE)
    assert saga.step_index == 1  # on_expired runs at whatever step; it is not a step
    assert compensations.envelopes == []  # nothing was debited, nothing to compensate


def test_an_instance_at_a_later_step_runs_on_expired_and_compensates(
    clock: FrozenDateTimeFactory, compensations: Recorder
) -> None:
    publish(TransferRequested("tr-1"))
    clock.tick(timedelta(minutes=5))
    publish(Debited("tr-1"))
    clock.move_to(DEADLINE + timedelta(minutes=3))

    drain_due()

    saga = the_saga(TransferFlow, "tr-1")
    assert saga.state["history"] == ["requested", "expired"]
    assert saga.is_complete
    assert compensations.events == [CompensationRequested("tr-1")]


def test_compensation_published_with_ignore_deadline_carries_no_deadline(
    clock: FrozenDateTimeFactory, compensations: Recorder
) -> None:
    publish(TransferRequested("tr-1"))
    publish(Debited("tr-1"))
    clock.move_to(DEADLINE)

    drain_due()

    [compensation] = compensations.envelopes
    assert compensation.deadline is None
    assert not bsft_saga.deadline_exceeded(compensation)


def test_a_refund_retried_by_a_timer_with_ignore_deadline_carries_no_deadline(
    clock: FrozenDateTimeFactory, action: Any
) -> None:
    # The refund is retried an hour later, past the deadline: it must still be accepted,
    # while forward work retried the same way arrives late.
    late = Recorder(RefundRequested, DebitRequested).connect()

    def retry_later(ctx: Any, e: ProbeStarted) -> None:
        hour = timedelta(hours=1)
        ctx.schedule_timeout("refund", hour, RefundRequested(e.probe_id), ignore_deadline=True)
        ctx.schedule_timeout("debit", hour, DebitRequested(e.probe_id))

    try:
        publish(ProbeStarted("p-1", action(retry_later)), deadline=DEADLINE)
        clock.tick(timedelta(hours=1))
        assert drain_due().fired == 2
    finally:
        late.disconnect()

    deadlines = {
        type(e.event): (e.deadline, bsft_saga.deadline_exceeded(e)) for e in late.envelopes
    }
    assert deadlines == {RefundRequested: (None, False), DebitRequested: (DEADLINE, True)}
    assert {row.name: row.ignore_deadline for row in timers_of(ProbeFlow, "p-1")} == {
        "refund": True,
        "debit": False,
    }


def test_on_expired_does_not_run_before_the_deadline(
    clock: FrozenDateTimeFactory, compensations: Recorder
) -> None:
    publish(TransferRequested("tr-1"))
    clock.move_to(DEADLINE - timedelta(seconds=1))

    assert drain_due().fired == 0

    saga = the_saga(TransferFlow, "tr-1")
    assert (saga.state["history"], saga.is_complete) == (["requested"], False)


def test_a_completed_instance_does_not_expire(
    clock: FrozenDateTimeFactory, compensations: Recorder
) -> None:
    publish(TransferRequested("tr-1"))
    publish(Debited("tr-1"))
    publish(TaskClosed("tr-1"))  # TransferFlow's last wait
    clock.move_to(DEADLINE + timedelta(hours=1))

    assert drain_due().fired == 0

    saga = the_saga(TransferFlow, "tr-1")
    assert "expired" not in saga.state["history"]
    assert deadline_timer(TransferFlow, "tr-1").outcome == TimeoutOutcome.CANCELED
    assert compensations.envelopes == []


def test_on_expired_that_raises_leaves_state_timer_and_outbox_untouched(
    clock: FrozenDateTimeFactory, ledger: Ledger
) -> None:
    ledger.credit = "silent"
    publish(PaymentRequested("p-1", fail_on_expiry=True))
    before = the_saga(PaymentFlow, "p-1")
    outbox_before = SagaOutboxMessage.objects.count()
    clock.move_to(T0 + PAYMENT_BUDGET)

    report = drain_due()

    assert report.failed == 1
    after = the_saga(PaymentFlow, "p-1")
    assert (after.version, after.state, after.is_complete) == (before.version, before.state, False)
    timer = deadline_timer(PaymentFlow, "p-1")
    assert (timer.is_pending, timer.attempts) == (True, 1)
    assert timer.last_error.startswith("ExpiryFailed")
    assert SagaOutboxMessage.objects.count() == outbox_before


# --- participants refuse late work; compensation runs exactly once ------------------------------


def test_deadline_exceeded_is_false_before_and_true_from_the_deadline(
    clock: FrozenDateTimeFactory,
) -> None:
    envelope = envelope_with(DEADLINE)

    clock.move_to(DEADLINE - timedelta(microseconds=1))
    assert bsft_saga.deadline_exceeded(envelope) is False
    assert envelope.deadline_exceeded is False
    clock.move_to(DEADLINE)
    assert bsft_saga.deadline_exceeded(envelope) is True
    clock.move_to(DEADLINE + timedelta(days=1))
    assert bsft_saga.deadline_exceeded(envelope) is True


def test_an_envelope_without_deadline_is_never_late(clock: FrozenDateTimeFactory) -> None:
    clock.move_to(datetime(2099, 1, 1, tzinfo=UTC))

    assert bsft_saga.deadline_exceeded(envelope_with(None)) is False


def test_a_participant_refuses_work_that_arrives_after_the_deadline(
    clock: FrozenDateTimeFactory, ledger: Ledger
) -> None:
    publish(DebitRequested("p-late"), deadline=T0 - timedelta(seconds=1))

    assert ledger.debits == []
    assert ledger.refused == ["p-late"]


def test_a_payment_within_its_budget_completes(
    clock: FrozenDateTimeFactory, ledger: Ledger
) -> None:
    publish(PaymentRequested("p-1"))

    saga = the_saga(PaymentFlow, "p-1")
    assert (saga.is_complete, saga.state["credited"]) == (True, True)
    assert (ledger.debits, ledger.credits, ledger.refunds) == (["p-1"], ["p-1"], [])


def test_a_stuck_debited_payment_is_refunded_at_its_deadline(
    clock: FrozenDateTimeFactory, ledger: Ledger
) -> None:
    ledger.credit = "silent"
    publish(PaymentRequested("p-1"))
    clock.move_to(T0 + PAYMENT_BUDGET)

    drain_due()

    saga = the_saga(PaymentFlow, "p-1")
    assert (saga.is_complete, saga.state["expired"], saga.state["refunded"]) == (True, True, True)
    assert ledger.refunds == ["p-1"]


def test_a_failed_credit_after_the_deadline_sweep_does_not_refund_twice(
    clock: FrozenDateTimeFactory, ledger: Ledger
) -> None:
    ledger.credit = "silent"
    publish(PaymentRequested("p-1"))
    clock.move_to(T0 + PAYMENT_BUDGET)
    drain_due()

    publish(CreditFailed("p-1", reason="late answer"))

    assert ledger.refunds == ["p-1"]


def test_the_deadline_after_a_failed_credit_does_not_refund_twice(
    clock: FrozenDateTimeFactory, ledger: Ledger
) -> None:
    ledger.credit = "fail"
    publish(PaymentRequested("p-1"))  # the credit fails at once: refund, saga completes
    clock.move_to(T0 + PAYMENT_BUDGET)

    assert drain_due().fired == 0

    assert ledger.refunds == ["p-1"]
    saga = the_saga(PaymentFlow, "p-1")
    assert (saga.state["expired"], saga.state["refunded"]) == (False, True)


def test_refund_requests_are_published_without_a_deadline(
    clock: FrozenDateTimeFactory, ledger: Ledger
) -> None:
    ledger.credit = "fail"

    publish(PaymentRequested("p-1"))

    [refund] = [e for e in ledger.envelopes if isinstance(e.event, RefundRequested)]
    assert refund.deadline is None


# --- the deadline is not an ordinary timer ---------------------------------------------------


def test_a_checklist_left_open_expires_at_its_deadline(clock: FrozenDateTimeFactory) -> None:
    publish(ChecklistOpened("c-1"))
    clock.move_to(T0 + CHECKLIST_BUDGET)

    drain_due()

    saga = the_saga(ChecklistFlow, "c-1")
    assert (saga.is_complete, saga.state["expired"]) == (True, True)
    assert {row.name: row.outcome for row in timers_of(ChecklistFlow, "c-1")} == {
        DEADLINE_TIMER_NAME: TimeoutOutcome.FIRED,
        "remind": TimeoutOutcome.CANCELED,
    }


def test_cancel_all_timeouts_in_a_step_keeps_the_deadline(clock: FrozenDateTimeFactory) -> None:
    publish(ChecklistOpened("c-1"))
    publish(ChecklistReset("c-1"))  # the step calls ctx.cancel_all_timeouts()
    clock.move_to(T0 + CHECKLIST_BUDGET)

    drain_due()

    saga = the_saga(ChecklistFlow, "c-1")
    assert (saga.is_complete, saga.state["expired"]) == (True, True)


@pytest.mark.parametrize(
    ("policy", "options"),
    [("fire_latest_per_saga", {}), ("skip_beyond_max_age", {"MAX_CATCH_UP_AGE": 3600})],
)
def test_a_deadline_that_passed_during_an_outage_still_expires_the_saga(
    clock: FrozenDateTimeFactory, policy: str, options: dict[str, Any]
) -> None:
    publish(ChecklistOpened("c-1"))
    clock.move_to(T0 + timedelta(days=2))  # deadline and reminder both overdue

    with override_settings(BSFT_SAGA={"TIMEOUTS": {"CATCH_UP_POLICY": policy, **options}}):
        drain_due()

    saga = the_saga(ChecklistFlow, "c-1")
    assert (saga.is_complete, saga.state["expired"]) == (True, True)


# --- docs/deadlines.md, "Testing deadlines" ---------------------------------------------------


def test_the_harness_runs_on_expired_when_time_passes_the_deadline(
    saga_harness: SagaHarness, ledger: Ledger
) -> None:
    ledger.credit = "silent"
    saga_harness.publish(PaymentRequested("p-1"))

    saga_harness.advance_time(PAYMENT_BUDGET)

    assert saga_harness.state(PaymentFlow, "p-1").refunded
    assert ledger.refunds == ["p-1"]


# --- only the instance's own deadline timer expires it -----------------------------------------


def _expires(saga_id: uuid.UUID, saga_type: str) -> DeadlineExpired:
    return DeadlineExpired(saga_id=str(saga_id), saga_type=saga_type)


@pytest.mark.parametrize("defer", [False, True])
def test_publishing_the_deadline_event_is_refused(clock: Any, defer: bool) -> None:
    publish(TransferRequested("tr-1"))
    saga = the_saga(TransferFlow, "tr-1")

    with pytest.raises(ValueError, match=r"'bsft_saga\.deadline-expired' is an event type of"):
        publish(_expires(saga.pk, TransferFlow.saga_type), defer=defer)

    assert the_saga(TransferFlow, "tr-1").state["history"] == ["requested"]
    assert not SagaOutboxMessage.objects.filter(event_type="bsft_saga.deadline-expired").exists()


@pytest.mark.parametrize("call", ["ctx.publish", "ctx.schedule_timeout"])
def test_a_step_may_not_publish_or_schedule_the_deadline_event(
    clock: Any, action: Callable[..., str], call: str
) -> None:
    publish(TransferRequested("tr-1"))
    target = _expires(the_saga(TransferFlow, "tr-1").pk, TransferFlow.saga_type)

    def forge(ctx: Any, e: Any) -> None:
        if call == "ctx.publish":
            ctx.publish(target)
        else:
            ctx.schedule_timeout("soon", timedelta(0), target)

    with pytest.raises(ValueError, match="is an event type of bsft_saga itself"):
        publish(ProbeStarted("forger", action(forge)))


def _timer(saga_id: uuid.UUID, name: str) -> TimerOrigin:
    values: dict[str, Any] = {
        "timer_id": 1,
        "saga_id": saga_id,
        "name": name,
        "claim_token": uuid.uuid4(),
    }
    # Any further field a timer's origin carries is one of its times.
    times: dict[str, Any] = {
        f.name: T0 for f in dataclasses.fields(TimerOrigin) if f.name not in values
    }
    return TimerOrigin(**values, **times)


def _send(event: DeadlineExpired, timer: TimerOrigin | None) -> None:
    """Deliver ``event`` as a receiver could, around ``publish()``."""
    event_published.send(sender=DeadlineExpired, envelope=envelope_with(None, event, timer))


@pytest.mark.parametrize(
    "forgery",
    [
        "no timer",
        "no timer, another flow's saga type",
        "another timer of the saga",
        "another saga's deadline timer",
        "its deadline timer, another flow's saga type",
    ],
)
def test_a_deadline_event_its_own_deadline_timer_did_not_send_is_ignored(
    clock: FrozenDateTimeFactory, forgery: str
) -> None:
    publish(TransferRequested("tr-1"))
    publish(TransferRequested("tr-2"))
    saga, other = the_saga(TransferFlow, "tr-1"), the_saga(TransferFlow, "tr-2")
    event, timer = {
        "no timer": (_expires(saga.pk, TransferFlow.saga_type), None),
        "no timer, another flow's saga type": (_expires(saga.pk, ChecklistFlow.saga_type), None),
        "another timer of the saga": (
            _expires(saga.pk, TransferFlow.saga_type),
            _timer(saga.pk, "remind"),
        ),
        "another saga's deadline timer": (
            _expires(saga.pk, TransferFlow.saga_type),
            _timer(other.pk, DEADLINE_TIMER_NAME),
        ),
        "its deadline timer, another flow's saga type": (
            _expires(saga.pk, ChecklistFlow.saga_type),
            _timer(saga.pk, DEADLINE_TIMER_NAME),
        ),
    }[forgery]

    _send(event, timer)

    after = the_saga(TransferFlow, "tr-1")
    assert (after.state["history"], after.is_complete) == (["requested"], False)
    assert deadline_timer(TransferFlow, "tr-1").outcome is None


def test_the_deadline_timer_still_expires_its_saga_after_a_forgery_was_ignored(
    clock: FrozenDateTimeFactory,
) -> None:
    publish(TransferRequested("tr-1"))
    _send(_expires(the_saga(TransferFlow, "tr-1").pk, TransferFlow.saga_type), None)
    clock.move_to(DEADLINE)

    assert drain_due().fired == 1

    saga = the_saga(TransferFlow, "tr-1")
    assert (saga.state["history"], saga.is_complete) == (["requested", "expired"], True)
