"""The engine: routing, step guard, inbox, versions, the step context and atomicity."""

from __future__ import annotations

import signal
import subprocess
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction
from freezegun import freeze_time

from bsft_saga import Envelope, SagaFlow, publish
from bsft_saga.events import codec
from bsft_saga.models import (
    SagaInboxEntry,
    SagaInstance,
    SagaOutboxMessage,
    SagaTimeout,
    TimeoutOutcome,
)
from bsft_saga.signals import event_published
from bsft_saga.testing import SagaHarness
from bsft_saga.timeouts import drain_due
from tests.support.receivers import receiving
from tests.testapp.engine_events import (
    DeadlineProbeStarted,
    ProbeEcho,
    ProbeNext,
    ProbeStarted,
    ReminderDue,
    ReminderRequested,
)
from tests.testapp.events import (
    FailingNext,
    FailingStarted,
    OrderCanceled,
    OrderPlaced,
    OrderShipped,
    ReserveStock,
    StockReserved,
    Tick,
)
from tests.testapp.flows import (
    DEADLINE_PROBE_BUDGET,
    REMINDER_DELAY,
    ContextProbeFlow,
    CounterFlow,
    CounterState,
    FailingFlow,
    FailingState,
    OrderFlow,
    OrderState,
    ProbeState,
    ReminderFlow,
    StepFailed,
)

NOW = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)
ROOT = Path(__file__).resolve().parents[2]


def instance(flow: type[SagaFlow], key: str) -> SagaInstance:
    """The newest instance of ``flow`` for ``key``."""
    return SagaInstance.objects.for_key(flow.saga_type, key).latest("created_at")


def instances(flow: type[SagaFlow], key: str) -> list[SagaInstance]:
    return list(SagaInstance.objects.for_key(flow.saga_type, key).order_by("created_at"))


def probe_state(key: str) -> ProbeState:
    return codec.decode(ProbeState, instance(ContextProbeFlow, key).state)


def snapshot(saga: SagaInstance) -> dict[str, Any]:
    """Everything a step could have written for ``saga``, as comparable values."""
    saga.refresh_from_db()
    return {
        "instance": (saga.state, saga.step_index, saga.version, saga.updated_at),
        "inbox": sorted(
            str(m) for m in SagaInboxEntry.objects.filter(saga=saga).values_list("message_id")
        ),
        "outbox": sorted(str(pk) for pk in SagaOutboxMessage.objects.values_list("pk", flat=True)),
        "timers": sorted(
            SagaTimeout.objects.filter(saga=saga).values_list(
                "name", "message_id", "scheduled_at", "dispatched_at", "outcome"
            )
        ),
    }


# --- step guard, start and completion -------------------------------------------------


@pytest.mark.django_db
def test_an_event_the_current_step_does_not_await_is_ignored() -> None:
    publish(OrderPlaced("o-1"))
    publish(OrderShipped("o-1"))  # awaited by step 2; the instance waits at step 1
    row = instance(OrderFlow, "o-1")
    assert (row.step_index, row.version) == (1, 1)
    assert not codec.decode(OrderState, row.state).shipped
    assert SagaInboxEntry.objects.filter(saga=row).count() == 1


@pytest.mark.django_db
def test_a_second_start_event_for_an_active_key_is_ignored() -> None:
    publish(OrderPlaced("o-1", total=Decimal("5")))
    publish(OrderPlaced("o-1", total=Decimal("500")))
    [row] = instances(OrderFlow, "o-1")
    assert row.version == 1
    assert codec.decode(OrderState, row.state).total == Decimal("5")


@pytest.mark.django_db
def test_a_completed_instance_is_kept_with_its_completion_time() -> None:
    with freeze_time(NOW):
        publish(OrderPlaced("o-1"))
    with freeze_time(NOW + timedelta(minutes=5)):
        publish(OrderCanceled("o-1"))
    [row] = instances(OrderFlow, "o-1")
    assert row.is_complete
    assert row.completed_at == NOW + timedelta(minutes=5)
    assert row.created_at == NOW


@pytest.mark.django_db
def test_a_completed_instance_takes_no_further_events() -> None:
    publish(OrderPlaced("o-1"))
    publish(OrderCanceled("o-1"))
    before = instance(OrderFlow, "o-1")
    publish(StockReserved("o-1"))
    publish(OrderShipped("o-1"))
    publish(OrderCanceled("o-1"))
    after = instance(OrderFlow, "o-1")
    assert after.pk == before.pk
    assert (after.version, after.step_index, after.state) == (
        before.version,
        before.step_index,
        before.state,
    )


@pytest.mark.django_db
def test_a_start_event_for_the_key_of_a_completed_instance_starts_a_new_one() -> None:
    with freeze_time(NOW):
        publish(OrderPlaced("o-1"))
        publish(OrderCanceled("o-1"))
    with freeze_time(NOW + timedelta(days=1)):
        publish(OrderPlaced("o-1", total=Decimal("3")))
    old, new = instances(OrderFlow, "o-1")
    assert old.is_complete
    assert not new.is_complete
    assert (new.step_index, new.version) == (1, 1)
    assert codec.decode(OrderState, new.state).total == Decimal("3")


# --- step_index and version -----------------------------------------------------------


@pytest.mark.django_db
def test_step_index_counts_the_steps_handled() -> None:
    publish(OrderPlaced("o-1"))
    assert instance(OrderFlow, "o-1").step_index == 1
    publish(StockReserved("o-1"))
    assert instance(OrderFlow, "o-1").step_index == 2
    publish(OrderShipped("o-1"))
    assert instance(OrderFlow, "o-1").step_index == 3


@pytest.mark.django_db
def test_each_transition_increments_the_version_and_stamps_updated_at() -> None:
    for minute, event in enumerate(
        [OrderPlaced("o-1"), StockReserved("o-1"), OrderShipped("o-1")], start=1
    ):
        with freeze_time(NOW + timedelta(minutes=minute)):
            publish(event)
        row = instance(OrderFlow, "o-1")
        assert row.version == minute
        assert row.updated_at == NOW + timedelta(minutes=minute)
    assert row.created_at == NOW + timedelta(minutes=1)


# --- the inbox: a message id advances an instance at most once ------------------------


@pytest.mark.django_db
def test_the_same_message_id_published_twice_advances_the_instance_once() -> None:
    publish(Tick("c-1", n=0))
    message_id = uuid.uuid4()
    publish(Tick("c-1", n=1), message_id=message_id)
    publish(Tick("c-1", n=1), message_id=message_id)
    row = instance(CounterFlow, "c-1")
    assert codec.decode(CounterState, row.state) == CounterState(count=2, seen=[0, 1])
    assert (row.step_index, row.version) == (2, 2)


@pytest.mark.django_db
def test_a_redelivered_start_event_of_a_finished_instance_starts_nothing() -> None:
    message_id = uuid.uuid4()
    publish(OrderPlaced("o-1"), message_id=message_id)
    publish(OrderCanceled("o-1"))
    publish(OrderPlaced("o-1"), message_id=message_id)
    [row] = instances(OrderFlow, "o-1")
    assert row.is_complete


# --- a failing step -------------------------------------------------------------------


@pytest.mark.django_db
def test_a_failing_start_step_propagates_and_creates_no_instance() -> None:
    with pytest.raises(StepFailed, match="job-1"):
        publish(FailingStarted("job-1", fail=True))
    assert not SagaInstance.objects.filter(saga_type=FailingFlow.saga_type).exists()
    assert not SagaOutboxMessage.objects.exists()
    assert not SagaTimeout.objects.exists()
    assert not SagaInboxEntry.objects.exists()


@pytest.mark.django_db
def test_a_failing_step_leaves_state_inbox_outbox_and_timers_unchanged() -> None:
    publish(FailingStarted("job-1", fail=False))
    saga = instance(FailingFlow, "job-1")
    before = snapshot(saga)
    with freeze_time(NOW), pytest.raises(StepFailed):
        publish(FailingNext("job-1", tags=["fail"]))
    assert snapshot(saga) == before


@pytest.mark.django_db
def test_a_failed_event_can_be_published_again_against_unchanged_state() -> None:
    publish(FailingStarted("job-1", fail=False))
    message_id = uuid.uuid4()
    with pytest.raises(StepFailed):
        publish(FailingNext("job-1", tags=["fail"]), message_id=message_id)
    # The same message, now without the poison tag: the inbox did not record the failure,
    # and the body sees the state as it was before the failed attempt.
    publish(FailingNext("job-1", tags=["retry"]), message_id=message_id)
    saga = instance(FailingFlow, "job-1")
    assert codec.decode(FailingState, saga.state) == FailingState(attempts=2, tags=["retry"])
    assert (saga.step_index, saga.version) == (2, 2)
    assert SagaInboxEntry.objects.filter(saga=saga, message_id=message_id).exists()


@pytest.mark.django_db
def test_a_staged_event_that_cannot_be_encoded_fails_its_step_not_its_delivery() -> None:
    with pytest.raises(TypeError, match=r"ProbeEcho\.kind"):
        publish(ProbeStarted("unencodable-1"))
    assert not SagaInstance.objects.filter(saga_type=ContextProbeFlow.saga_type).exists()
    assert not SagaOutboxMessage.objects.exists()


# --- completion -----------------------------------------------------------------------


@pytest.mark.django_db
def test_mark_complete_ends_the_saga_before_its_last_step() -> None:
    with freeze_time(NOW):
        publish(OrderPlaced("o-1"))
        publish(OrderCanceled("o-1"))
    row = instance(OrderFlow, "o-1")
    assert row.is_complete
    assert row.completed_at == NOW
    assert row.step_index == 2  # of 3 steps
    assert codec.decode(OrderState, row.state).canceled


@pytest.mark.django_db(transaction=True)
def test_a_canceled_order_is_complete() -> None:
    # Verbatim in docs/getting-started.md ("Test your flows").
    with SagaHarness() as harness:
        harness.publish(OrderPlaced("o-1"))
        harness.publish(OrderCanceled("o-1"))
        saga = harness.get_saga(OrderFlow, "o-1")
    assert saga is not None
    assert saga.is_complete


# --- the step context -----------------------------------------------------------------


@pytest.mark.django_db
def test_ctx_state_is_the_state_the_previous_step_left() -> None:
    publish(ProbeStarted("p-1"))
    assert probe_state("p-1").steps == 1
    publish(ProbeNext("p-1"))
    assert probe_state("p-1").steps == 2


@pytest.mark.django_db
def test_ctx_correlation_key_is_the_key_of_the_instance() -> None:
    publish(ProbeStarted("p-1"))
    assert probe_state("p-1").correlation_key == "p-1"


@pytest.mark.django_db
def test_ctx_saga_id_is_the_instance_id_in_every_step() -> None:
    publish(ProbeStarted("p-1"))
    saga_id = instance(ContextProbeFlow, "p-1").pk
    assert probe_state("p-1").saga_id == str(saga_id)
    publish(ProbeNext("p-1"))
    assert probe_state("p-1").saga_id == str(saga_id)


@pytest.mark.django_db
def test_ctx_envelope_is_the_envelope_being_handled() -> None:
    envelope = publish(ProbeStarted("p-1"), correlation_id="req-1")
    state = probe_state("p-1")
    assert state.message_id == str(envelope.message_id)
    assert state.event_type == "tests.engine.probe-started"
    assert state.correlation_id == "req-1"
    next_envelope = publish(ProbeNext("p-1"))
    assert probe_state("p-1").message_id == str(next_envelope.message_id)


@pytest.mark.django_db
def test_ctx_now_is_the_clock_time_of_the_step() -> None:
    with freeze_time(NOW):
        publish(ProbeStarted("p-1"))
    assert probe_state("p-1").now == NOW
    assert instance(ContextProbeFlow, "p-1").updated_at == NOW


@pytest.mark.django_db
def test_ctx_publish_writes_an_outbox_row_in_the_steps_commit() -> None:
    envelope = publish(ProbeStarted("p-1"), correlation_id="req-1")
    saga = instance(ContextProbeFlow, "p-1")
    rows = SagaOutboxMessage.objects.filter(saga=saga).order_by("payload__kind")
    assert [(r.event_type, r.payload["kind"]) for r in rows] == [
        ("tests.engine.probe-echo", "compensation"),
        ("tests.engine.probe-echo", "forward"),
    ]
    assert {r.causation_id for r in rows} == {envelope.message_id}
    assert {r.correlation_id for r in rows} == {"req-1"}
    assert all(r.delivered_at is None for r in rows)  # this test's transaction never commits


@pytest.mark.django_db(transaction=True)
def test_ctx_publish_is_delivered_right_after_the_steps_own_commit() -> None:
    with receiving(ReserveStock) as received:
        publish(OrderPlaced("o-1"))
        assert [e.event for e in received] == [ReserveStock("o-1")]
    row = SagaOutboxMessage.objects.get()
    assert row.delivered_at is not None


@pytest.mark.django_db(transaction=True)
def test_ctx_publish_is_delivered_only_after_the_callers_transaction_commits() -> None:
    with receiving(ReserveStock) as received:
        with transaction.atomic():
            publish(OrderPlaced("o-1"))
            assert instance(OrderFlow, "o-1").step_index == 1
            assert received == []
            assert SagaOutboxMessage.objects.pending().count() == 1
        assert [e.event for e in received] == [ReserveStock("o-1")]
    assert SagaOutboxMessage.objects.pending().count() == 0


@pytest.mark.django_db(transaction=True)
def test_ctx_publish_carries_the_correlation_id_and_the_handled_message_as_cause() -> None:
    with receiving(ProbeEcho) as received:
        envelope = publish(ProbeStarted("p-1"), correlation_id="req-9")
    assert len(received) == 2
    assert {e.correlation_id for e in received} == {"req-9"}
    assert {e.causation_id for e in received} == {envelope.message_id}
    assert envelope.message_id not in {e.message_id for e in received}


@pytest.mark.django_db(transaction=True)
def test_ctx_publish_carries_the_incoming_deadline_unless_told_to_ignore_it() -> None:
    deadline = NOW + timedelta(hours=3)
    with receiving(ProbeEcho) as received:
        publish(ProbeStarted("p-1"), deadline=deadline)
    by_kind = {e.event.kind: e for e in received}
    assert by_kind["forward"].deadline == deadline
    assert by_kind["compensation"].deadline is None


@pytest.mark.django_db(transaction=True)
def test_ctx_publish_carries_the_sagas_own_deadline_unless_told_to_ignore_it() -> None:
    with freeze_time(NOW), receiving(ProbeEcho) as received:
        publish(DeadlineProbeStarted("p-1"))
    by_kind = {e.event.kind: e for e in received}
    assert by_kind["forward"].deadline == NOW + DEADLINE_PROBE_BUDGET
    assert by_kind["compensation"].deadline is None


@pytest.mark.django_db(transaction=True)
def test_step_bodies_run_outside_any_transaction_the_engine_opened() -> None:
    publish(ProbeStarted("p-1"))
    assert probe_state("p-1").in_atomic_block is False


# --- the caller's transaction ---------------------------------------------------------


class CallerFailed(Exception):
    pass


@pytest.mark.django_db(transaction=True)
def test_a_step_inside_the_callers_transaction_commits_with_it() -> None:
    with transaction.atomic():
        publish(OrderPlaced("o-1"))
        publish(StockReserved("o-1"))
    row = instance(OrderFlow, "o-1")
    assert (row.step_index, row.version) == (2, 2)


@pytest.mark.django_db(transaction=True)
def test_rolling_back_the_callers_transaction_rolls_back_the_saga() -> None:
    publish(OrderPlaced("o-1"))
    before = snapshot(instance(OrderFlow, "o-1"))

    def start_and_advance_then_fail() -> None:
        with transaction.atomic():
            publish(OrderPlaced("o-2"))
            publish(StockReserved("o-1"))
            raise CallerFailed

    with receiving(ReserveStock) as received, pytest.raises(CallerFailed):
        start_and_advance_then_fail()
    assert received == []
    assert not SagaInstance.objects.for_key(OrderFlow.saga_type, "o-2").exists()
    assert snapshot(instance(OrderFlow, "o-1")) == before


# --- at least once for plain receivers ------------------------------------------------


class ReceiverFailed(Exception):
    pass


@pytest.mark.django_db(transaction=True)
def test_a_receiver_that_failed_on_a_timer_event_that_woke_its_saga_gets_it_again() -> None:
    calls: list[uuid.UUID] = []

    def flaky(sender: type, *, envelope: Envelope, **kwargs: Any) -> None:
        calls.append(envelope.message_id)
        if len(calls) == 1:
            raise ReceiverFailed("mail server down")

    event_published.connect(flaky, sender=ReminderDue, weak=False)
    try:
        with SagaHarness(start=NOW) as harness:
            harness.publish(ReminderRequested("r-1"))
            harness.advance_time(REMINDER_DELAY)
            harness.advance_time(timedelta(minutes=10))
            saga = harness.get_saga(ReminderFlow, "r-1")
    finally:
        event_published.disconnect(flaky, sender=ReminderDue)
    assert saga is not None
    assert saga.is_complete
    assert len(calls) == 2
    assert calls[0] == calls[1]


@pytest.mark.slow
def test_a_dispatcher_that_died_after_its_saga_woke_leaves_nothing_and_the_timer_fires_again(
    subprocess_env: dict[str, str], python: str
) -> None:
    real_now = datetime.now(UTC)
    with freeze_time(real_now - timedelta(minutes=10)):
        publish(ReminderRequested("r-crash"))  # its timer fell due 9 minutes ago
    child = subprocess.Popen(
        [python, "-m", "tests.workers.engine_timer_then_die"],
        env=subprocess_env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _, stderr = child.communicate(timeout=120)
    assert child.returncode == -signal.SIGKILL, stderr
    saga = instance(ReminderFlow, "r-crash")
    timer = SagaTimeout.objects.get(saga=saga)
    # The woken step ran inside the batch's transaction, which never committed.
    assert (saga.is_complete, saga.step_index) == (False, 1)
    assert timer.is_pending
    assert timer.claimed_until is not None  # the dead dispatcher's claim, until its lease ends

    # Measured from the claim the child wrote, so its start-up time does not matter.
    with (
        receiving(ReminderDue) as received,
        freeze_time(timer.claimed_until + timedelta(seconds=1)),
    ):
        assert drain_due().fired == 1
    assert [e.event for e in received] == [ReminderDue("r-crash")]
    assert instance(ReminderFlow, "r-crash").is_complete
    assert SagaTimeout.objects.get(saga=saga).outcome == TimeoutOutcome.FIRED
