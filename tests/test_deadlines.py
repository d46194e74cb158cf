"""Deadlines: ``with_deadline(budget, on_expired=...)`` and ``deadline_exceeded(envelope)``
(docs/deadlines.md): a budget set when the saga starts travels with every event it causes.

TransferFlow (30 minutes) and PaymentFlow (30 minutes, with the Ledger as its account
service) live in tests/testapp/timer_flows.py. Transactional, because events a step
publishes are delivered after its commit.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import override_settings
from freezegun.api import FrozenDateTimeFactory

import bsft_saga
from bsft_saga import Envelope, publish
from bsft_saga.engine.deadlines import DEADLINE_TIMER_NAME
from bsft_saga.models import SagaOutboxMessage, TimeoutOutcome
from bsft_saga.testing import SagaHarness
from bsft_saga.timeouts import drain_due
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
    RefundRequested,
)
from tests.testapp.timer_flows import (
    CHECKLIST_BUDGET,
    PAYMENT_BUDGET,
    ChecklistFlow,
    Ledger,
    PaymentFlow,
    QuoteFlow,
    Recorder,
    TransferFlow,
    the_saga,
    timers_of,
)
from tests.timer_fixtures import T0

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


def envelope_with(deadline: datetime | None) -> Envelope:
    return Envelope(
        message_id=uuid.uuid4(),
        event=DebitRequested("p-1"),
        event_type="tests.timers.debit-requested",
        correlation_id=None,
        causation_id=None,
        deadline=deadline,
        published_at=T0,
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
