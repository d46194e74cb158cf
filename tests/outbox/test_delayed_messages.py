"""Delayed messages: ``publish(event, deliver_at=...)`` / ``delay=...`` and ``ctx.publish``.

A delayed message is an outbox row with a delivery time (``deliver_at``). It is written in
the caller's transaction (or the step's window); nothing hands it to a worker at commit; no
pass claims it before ``deliver_at``; from then on it is delivered like any deferred event:
at least once, with back-off, dead letters and requeue.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from freezegun import freeze_time

from bsft_saga import publish, tasks
from bsft_saga.models import SagaInboxEntry, SagaInstance, SagaOutboxMessage
from bsft_saga.outbox import deliver_pending, requeue_dead_lettered
from bsft_saga.querysets import DeliveryStatus
from bsft_saga.signals import deferred_event_committed
from bsft_saga.testing import SagaHarness
from bsft_saga.timeouts import drain_due
from tests.support.receivers import receiving
from tests.support.services import require_postgres_backend
from tests.testapp.delayed_events import (
    InvoiceIssued,
    InvoicePaid,
    InvoiceReminderDue,
    SubscriptionEnded,
)
from tests.testapp.delayed_flows import REMINDER_DELAY, InvoiceFlow
from tests.testapp.engine_events import Unrouted
from tests.testapp.timer_events import ProbeDue, ProbePoked, ProbeStarted
from tests.testapp.timer_flows import ProbeFlow, Recorder, the_saga

NOW = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)
DELAY = timedelta(hours=2)
LATER = NOW + DELAY
TICK = timedelta(microseconds=1)


@pytest.fixture
def hand_offs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[uuid.UUID]]:
    """The message ids handed to a worker at commit: the ``deferred_event_committed``
    signal, and the Celery enqueue it makes (recorded instead of sent)."""
    handed: list[uuid.UUID] = []
    enqueued: list[str] = []

    def on_committed(sender: Any, *, message_id: uuid.UUID, **kwargs: Any) -> None:
        handed.append(message_id)

    monkeypatch.setattr(tasks.deliver_event, "delay", enqueued.append)
    deferred_event_committed.connect(on_committed, weak=False, dispatch_uid="test.hand-offs")
    try:
        yield handed
    finally:
        deferred_event_committed.disconnect(dispatch_uid="test.hand-offs")
    assert [uuid.UUID(m) for m in enqueued] == handed  # every hand-off was an enqueue


def _row(message_id: uuid.UUID) -> SagaOutboxMessage:
    return SagaOutboxMessage.objects.get(pk=message_id)


# --- publish(deliver_at=...), publish(delay=...) --------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("when", [{"delay": DELAY}, {"deliver_at": LATER}], ids=["delay", "at"])
def test_a_delayed_message_is_written_in_the_transaction_and_not_handed_over_at_commit(
    when: dict[str, Any], hand_offs: list[uuid.UUID]
) -> None:
    with freeze_time(NOW), receiving(Unrouted) as received:
        with transaction.atomic():
            envelope = publish(Unrouted("later"), **when)
            assert _row(envelope.message_id).deliver_at == LATER
        deferred = publish(Unrouted("now"), defer=True)  # the control: handed over

    row = _row(envelope.message_id)
    assert (row.created_at, row.deliver_at, row.delivered_at) == (NOW, LATER, None)
    assert row.saga is None
    assert received == []
    assert hand_offs == [deferred.message_id]


@pytest.mark.django_db(transaction=True)
def test_a_delayed_message_of_a_rolled_back_transaction_leaves_nothing() -> None:
    def publish_then_fail() -> None:
        with transaction.atomic():
            publish(Unrouted("later"), delay=DELAY)
            raise RuntimeError("the caller changed its mind")

    with freeze_time(NOW), pytest.raises(RuntimeError):
        publish_then_fail()
    assert not SagaOutboxMessage.objects.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("again", ["waiting", "delivered"])
def test_publishing_a_delayed_message_again_writes_nothing_and_it_is_delivered_once(
    again: str, hand_offs: list[uuid.UUID]
) -> None:
    # A retried request or a replayed import publishes the same envelope (message id) twice.
    message_id = uuid.uuid4()
    with freeze_time(NOW):
        publish(Unrouted("later"), message_id=message_id, delay=DELAY)
    if again == "delivered":
        with freeze_time(LATER):
            assert deliver_pending().delivered == 1

    with freeze_time(NOW + timedelta(minutes=5)):
        publish(Unrouted("later"), message_id=message_id, deliver_at=LATER + DELAY)
        publish(Unrouted("later"), message_id=message_id, defer=True)

    row = _row(message_id)
    assert (row.created_at, row.deliver_at) == (NOW, LATER)
    assert hand_offs == []
    with freeze_time(LATER + 2 * DELAY), receiving(Unrouted) as received:
        deliver_pending()
    assert len(received) == (1 if again == "waiting" else 0)
    assert SagaOutboxMessage.objects.count() == 1


@pytest.mark.django_db
def test_no_pass_delivers_a_delayed_message_before_its_deliver_at() -> None:
    with freeze_time(NOW):
        envelope = publish(Unrouted("later"), deliver_at=LATER)

    with receiving(Unrouted) as received:
        for moment in (NOW, LATER - TICK):
            with freeze_time(moment):
                assert deliver_pending().delivered == 0
                assert _row(envelope.message_id).status() == DeliveryStatus.WAITING
        with freeze_time(LATER):
            assert _row(envelope.message_id).status() == DeliveryStatus.READY
            assert deliver_pending().delivered == 1
            assert deliver_pending().delivered == 0

    assert [(e.message_id, e.event) for e in received] == [(envelope.message_id, Unrouted("later"))]
    assert _row(envelope.message_id).delivered_at == LATER


@pytest.mark.django_db
def test_a_delayed_message_delivered_late_is_delivered_at_the_first_pass_after_its_time() -> None:
    with freeze_time(NOW):
        envelope = publish(Unrouted("later"), delay=DELAY)

    with freeze_time(LATER + timedelta(days=3)), receiving(Unrouted) as received:
        assert deliver_pending().delivered == 1
    assert [e.message_id for e in received] == [envelope.message_id]


@pytest.mark.django_db
def test_a_delay_of_zero_or_a_time_that_has_passed_is_ready_at_once_for_the_drain() -> None:
    with freeze_time(NOW):
        zero = publish(Unrouted("zero"), delay=timedelta(0))
        past = publish(Unrouted("past"), deliver_at=NOW - timedelta(days=1))

        with receiving(Unrouted) as received:
            assert deliver_pending().delivered == 2
    assert {e.message_id for e in received} == {zero.message_id, past.message_id}


@pytest.mark.django_db
def test_the_drain_delivers_delayed_messages_in_the_order_of_their_deliver_at() -> None:
    with freeze_time(NOW):
        third = publish(Unrouted("third"), delay=timedelta(minutes=3))
        first = publish(Unrouted("first"), delay=timedelta(minutes=1))
        publish(Unrouted("not yet"), delay=timedelta(hours=1))
        second = publish(Unrouted("second"), deliver_at=NOW + timedelta(minutes=2))

    with freeze_time(NOW + timedelta(minutes=5)), receiving(Unrouted) as received:
        assert deliver_pending().delivered == 3
    assert [e.message_id for e in received] == [
        first.message_id,
        second.message_id,
        third.message_id,
    ]


@pytest.mark.django_db(transaction=True)
def test_a_subscription_end_arrives_at_the_end_of_the_paid_period() -> None:
    paid_until = NOW + timedelta(days=30)
    with freeze_time(NOW), transaction.atomic():
        publish(SubscriptionEnded("sub-1"), deliver_at=paid_until)

    with receiving(SubscriptionEnded) as received:
        with freeze_time(paid_until - timedelta(seconds=1)):
            assert tasks.drain_saga_timeouts()["delivered"] == 0
        with freeze_time(paid_until):
            assert tasks.drain_saga_timeouts()["delivered"] == 1
    assert [e.event for e in received] == [SubscriptionEnded("sub-1")]


# --- what publish() refuses ------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("when", "error", "message"),
    [
        ({"delay": DELAY, "deliver_at": LATER}, ValueError, "pass deliver_at or delay, not both"),
        ({"delay": timedelta(seconds=-1)}, ValueError, "delay must be >= 0"),
        ({"delay": 60}, TypeError, "delay must be a timedelta, got int"),
        ({"delay": timedelta(days=3_000_000)}, ValueError, "the delay 3000000 days.* runs past"),
        ({"deliver_at": datetime(2026, 3, 2, 12)}, ValueError, "deliver_at must be an aware"),
        ({"deliver_at": "tomorrow"}, TypeError, "deliver_at must be an aware datetime, got str"),
        (
            {"deliver_at": datetime(9999, 12, 31, 23, 0, tzinfo=UTC)},
            ValueError,
            "deliver_at 9999-12-31T23:00:00[+]00:00 is out of range",
        ),
    ],
    ids=["both", "negative", "not-a-timedelta", "too-long", "naive", "not-a-datetime", "range"],
)
def test_publish_refuses_a_delivery_time_it_cannot_keep_and_writes_nothing(
    when: dict[str, Any], error: type[Exception], message: str
) -> None:
    with (
        freeze_time(NOW),
        pytest.raises(error, match=rf"publish\(tests\.engine\.unrouted\): {message}"),
    ):
        publish(Unrouted("later"), **when)
    assert not SagaOutboxMessage.objects.exists()


# --- after its time: delivered like any deferred event -----------------------------------


@pytest.mark.django_db
def test_a_delayed_message_that_fails_backs_off_is_dead_lettered_and_requeued() -> None:
    with freeze_time(NOW):
        envelope = publish(Unrouted("later"), delay=DELAY)
    recorder = Recorder(Unrouted).connect()
    recorder.fail_with = ConnectionError("mail server down")
    try:
        with override_settings(BSFT_SAGA={"DELIVERY": {"MAX_DISPATCH_ATTEMPTS": 2}}):
            with freeze_time(LATER):
                assert deliver_pending().failed == 1
            row = _row(envelope.message_id)
            assert row.attempts == 1
            assert "mail server down" in row.last_error
            assert row.next_attempt_at is not None
            assert row.next_attempt_at > LATER
            with freeze_time(row.next_attempt_at - TICK):
                assert deliver_pending().failed == 0  # not before its back-off
            with freeze_time(row.next_attempt_at):
                assert deliver_pending().dead_lettered == 1
        assert _row(envelope.message_id).status() == DeliveryStatus.DEAD_LETTERED

        recorder.fail_with = None
        assert requeue_dead_lettered([envelope.message_id]).requeued == 1
        assert deliver_pending().delivered == 1
    finally:
        recorder.disconnect()
    assert [e.message_id for e in recorder.envelopes] == [envelope.message_id] * 3
    assert _row(envelope.message_id).deliver_at == LATER  # kept: it is still a delayed message


# --- the Celery tasks ------------------------------------------------------------------


@pytest.mark.django_db
def test_the_celery_tasks_deliver_a_delayed_message_only_once_its_time_has_come() -> None:
    with freeze_time(NOW):
        envelope = publish(Unrouted("later"), delay=DELAY)
    message_id = str(envelope.message_id)

    with receiving(Unrouted) as received:
        with freeze_time(LATER - TICK):
            assert tasks.deliver_event(message_id) == 0  # a stray enqueue delivers nothing
            assert tasks.drain_saga_timeouts()["delivered"] == 0
        with freeze_time(LATER):
            assert tasks.drain_saga_timeouts()["delivered"] == 1
            assert tasks.deliver_event(message_id) == 0  # delivered already
    assert [e.message_id for e in received] == [envelope.message_id]


@pytest.mark.django_db
def test_deliver_event_delivers_a_delayed_message_whose_time_has_come() -> None:
    with freeze_time(NOW):
        envelope = publish(Unrouted("later"), delay=DELAY)

    with freeze_time(LATER), receiving(Unrouted) as received:
        assert tasks.deliver_event(str(envelope.message_id)) == 1
    assert [e.message_id for e in received] == [envelope.message_id]


# --- ctx.publish(deliver_at=..., delay=...) ------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_delayed_message_from_a_step_commits_with_the_step_and_waits_for_its_time(
    action: Callable[[Callable[[Any, Any], None]], str],
) -> None:
    def remind_later(ctx: Any, e: ProbeStarted) -> None:
        ctx.publish(ProbeDue(e.probe_id, "later"), delay=DELAY)

    with freeze_time(NOW), receiving(ProbeDue) as received:
        envelope = publish(ProbeStarted("p-1", action(remind_later)))  # commits the step

    saga = the_saga(ProbeFlow, "p-1")
    row = SagaOutboxMessage.objects.get(saga=saga)
    assert (row.event_type, row.created_at, row.deliver_at) == (
        "tests.timers.probe-due",
        NOW,
        LATER,
    )
    assert SagaInboxEntry.objects.filter(saga=saga, message_id=envelope.message_id).exists()
    assert received == []  # not delivered after the step's commit
    with freeze_time(LATER), receiving(ProbeDue) as received:
        assert deliver_pending().delivered == 1
    assert [(e.message_id, e.causation_id) for e in received] == [(row.pk, envelope.message_id)]


@pytest.mark.django_db(transaction=True)
def test_a_step_that_raises_after_publishing_a_delayed_message_leaves_nothing(
    action: Callable[[Callable[[Any, Any], None]], str],
) -> None:
    def remind_then_fail(ctx: Any, e: ProbeStarted) -> None:
        ctx.publish(ProbeDue(e.probe_id), deliver_at=LATER)
        raise RuntimeError("the step failed after publishing")

    with freeze_time(NOW), pytest.raises(RuntimeError):
        publish(ProbeStarted("p-1", action(remind_then_fail)))
    assert not SagaInstance.objects.filter(saga_type=ProbeFlow.saga_type).exists()
    assert not SagaOutboxMessage.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("when", "error", "message"),
    [
        ({"delay": DELAY, "deliver_at": LATER}, ValueError, "pass deliver_at or delay, not both"),
        ({"delay": timedelta(minutes=-5)}, ValueError, "delay must be >= 0"),
        ({"deliver_at": datetime(2026, 3, 2, 12)}, ValueError, "deliver_at must be an aware"),
    ],
    ids=["both", "negative", "naive"],
)
def test_ctx_publish_refuses_a_delivery_time_and_the_step_leaves_nothing(
    action: Callable[[Callable[[Any, Any], None]], str],
    when: dict[str, Any],
    error: type[Exception],
    message: str,
) -> None:
    def remind(ctx: Any, e: ProbeStarted) -> None:
        ctx.publish(ProbeDue(e.probe_id), **when)

    with (
        freeze_time(NOW),
        pytest.raises(error, match=rf"ctx\.publish\(tests\.timers\.probe-due\): {message}"),
    ):
        publish(ProbeStarted("p-1", action(remind)))
    assert not SagaInstance.objects.filter(saga_type=ProbeFlow.saga_type).exists()
    assert not SagaOutboxMessage.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_step_woken_by_a_timer_commits_its_delayed_message_with_the_timers_stamp(
    action: Callable[[Callable[[Any, Any], None]], str],
) -> None:
    def remind_later(ctx: Any, e: ProbePoked) -> None:
        ctx.publish(ProbeDue(e.probe_id, "from the timer's step"), delay=DELAY)

    def schedule_poke(ctx: Any, e: ProbeStarted) -> None:
        ctx.schedule_timeout("poke", timedelta(minutes=1), ProbePoked(e.probe_id, poke))

    poke = action(remind_later)
    with freeze_time(NOW):
        publish(ProbeStarted("p-1", action(schedule_poke)))
    fired_at = NOW + timedelta(minutes=1)
    with freeze_time(fired_at), receiving(ProbeDue) as received:
        assert drain_due().fired == 1

    saga = the_saga(ProbeFlow, "p-1")
    assert saga.step_index == 2
    [row] = SagaOutboxMessage.objects.filter(saga=saga)
    assert (row.deliver_at, row.delivered_at) == (fired_at + DELAY, None)
    assert received == []  # the pass's commit handed nothing over
    with freeze_time(fired_at + DELAY), receiving(ProbeDue) as received:
        assert deliver_pending().delivered == 1
    assert [e.event.label for e in received] == ["from the timer's step"]


# --- the docs' InvoiceFlow ---------------------------------------------------------------


@pytest.fixture
def harness(transactional_db: None) -> Iterator[SagaHarness]:
    with SagaHarness(start=NOW) as harness:
        yield harness


def test_an_unpaid_invoice_is_reminded_when_its_delayed_message_arrives(
    harness: SagaHarness,
) -> None:
    harness.publish(InvoiceIssued("inv-1"))

    harness.advance_time(REMINDER_DELAY - timedelta(seconds=1))
    assert harness.state(InvoiceFlow, "inv-1").reminded is False
    harness.advance_time(timedelta(seconds=1))

    assert harness.state(InvoiceFlow, "inv-1").reminded is True
    saga = harness.get_saga(InvoiceFlow, "inv-1")
    assert saga is not None
    assert (saga.is_complete, saga.completed_at) == (True, NOW + REMINDER_DELAY)


def test_a_reminder_for_a_paid_invoice_arrives_and_changes_nothing(harness: SagaHarness) -> None:
    harness.publish(InvoiceIssued("inv-2"))
    harness.publish(InvoicePaid("inv-2"))

    with receiving(InvoiceReminderDue) as received:
        harness.advance_time(REMINDER_DELAY)

    assert len(received) == 1  # a delayed message cannot be canceled: it arrives anyway
    assert harness.state(InvoiceFlow, "inv-2").paid is True
    assert harness.state(InvoiceFlow, "inv-2").reminded is False


# --- cost and plans ----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_publishing_a_delayed_message_costs_one_insert_and_nothing_at_commit() -> None:
    with CaptureQueriesContext(connection) as captured:
        publish(Unrouted("later"), delay=DELAY)

    assert [q["sql"].split()[0] for q in captured.captured_queries] == ["INSERT"]


@pytest.mark.postgres
@pytest.mark.django_db
def test_the_outbox_claim_reads_the_ready_index_beside_many_delayed_and_delivered_rows() -> None:
    require_postgres_backend()
    outbox = SagaOutboxMessage._meta.db_table
    with connection.cursor() as cursor:
        # 20,000 delivered rows and 20,000 delayed messages waiting for next month.
        cursor.execute(
            f"""
            INSERT INTO {outbox} (id, event_type, payload, correlation_id, created_at,
                deliver_at, delivered_at, attempts, last_error)
            SELECT gen_random_uuid(), 'tests.engine.unrouted', '{{"note": ""}}', '',
                %s - g * interval '1 second',
                CASE WHEN g %% 2 = 0 THEN %s + g * interval '1 second' END,
                CASE WHEN g %% 2 = 1 THEN %s END, 0, ''
            FROM generate_series(1, 40000) AS g
            """,
            [NOW, NOW + timedelta(days=30), NOW],
        )
        cursor.execute(f"ANALYZE {outbox}")
    with freeze_time(NOW):
        publish(Unrouted("now"), defer=True)
    claimable = SagaOutboxMessage.objects.claimable(NOW).select_for_update(skip_locked=True)
    sql, params = claimable[:100].query.sql_with_params()

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
        plan = cursor.fetchone()[0][0]["Plan"]
    nodes = _plan_nodes(plan)
    scans = {node["Node Type"] for node in nodes if node.get("Relation Name") == outbox}
    assert scans == {"Index Scan"}, nodes
    assert {node.get("Index Name") for node in nodes if "Index Name" in node} == {
        "bsft_saga_outbox_ready_idx"
    }
    assert all("Sort" not in node["Node Type"] for node in nodes), nodes
    with freeze_time(NOW):
        assert deliver_pending().delivered == 1


def _plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan, *(node for child in plan.get("Plans", []) for node in _plan_nodes(child))]
