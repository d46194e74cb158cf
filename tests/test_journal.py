"""The journal: one entry per transition and per operator action, in the commit of what it
records, and nothing for what rolled back."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import transaction
from django.test import override_settings
from freezegun.api import FrozenDateTimeFactory

from bsft_saga import publish
from bsft_saga.engine.termination import terminate
from bsft_saga.models import (
    JournalKind,
    JournalVia,
    SagaInboxEntry,
    SagaInstance,
    SagaJournalEntry,
    SagaOutboxMessage,
    SagaTimeout,
    TimeoutOutcome,
)
from bsft_saga.timeouts import drain_due
from bsft_saga.timeouts.edits import cancel_timers, reschedule_timer
from bsft_saga.timeouts.expedite import fire_now
from bsft_saga.timeouts.maintenance import requeue_dead_lettered
from bsft_saga.timeouts.requests import DEADLINE_TIMER_NAME
from tests.support.receivers import receiving
from tests.support.timer_fixtures import T0
from tests.testapp.branch_events import (
    InvoiceIssued,
    NoteAdded,
    OrderAccepted,
    ParcelPacked,
    PaymentAuthorised,
)
from tests.testapp.branch_flows import REMINDER_INTERVAL, DunningFlow, FulfilmentFlow
from tests.testapp.delayed_events import ShipmentBooked, ShipmentDelivered
from tests.testapp.delayed_flows import STANDARD_BUDGET, ShipmentFlow
from tests.testapp.dispatch_events import InvoicePaid, InvoiceSent
from tests.testapp.dispatch_flows import InvoiceFlow
from tests.testapp.events import OrderPlaced, QuoteFollowUpDue, QuoteSent, ReserveStock
from tests.testapp.flows import OrderFlow
from tests.testapp.timer_flows import QuoteFlow

pytestmark = pytest.mark.django_db(transaction=True)


def _saga(saga_type: str, key: str) -> SagaInstance:
    return SagaInstance.objects.get(saga_type=saga_type, correlation_key=key)


def _journal(saga: SagaInstance) -> list[tuple[Any, ...]]:
    """The saga's entries, oldest first: (kind, via, event type or timer, before, after)."""
    return [
        (e.kind, e.via, e.timer_name or e.event_type, e.step_before, e.step_after)
        for e in SagaJournalEntry.objects.filter(saga=saga).order_by("at", "id")
    ]


def test_each_transition_is_an_entry_saying_what_delivered_it(clock: FrozenDateTimeFactory) -> None:
    publish(InvoiceSent("j-1", remind_after_seconds=60), correlation_id="req-7")
    clock.tick(timedelta(seconds=61))
    assert drain_due().fired == 1
    clock.tick(timedelta(seconds=5))
    publish(InvoicePaid("j-1"), correlation_id="req-8")

    saga = _saga(InvoiceFlow.saga_type, "j-1")
    assert _journal(saga) == [
        (JournalKind.STARTED, JournalVia.PUBLISH, "tests.dispatch.invoice-sent", None, 1),
        (JournalKind.ADVANCED, JournalVia.TIMER, "reminder", 1, 2),
        (JournalKind.ADVANCED, JournalVia.PUBLISH, "tests.dispatch.invoice-paid", 2, 3),
    ]
    entries = list(SagaJournalEntry.objects.filter(saga=saga).order_by("at", "id"))
    assert [e.version for e in entries] == [1, 2, 3]
    assert [e.at for e in entries] == [
        T0,
        T0 + timedelta(seconds=61),
        T0 + timedelta(seconds=66),
    ]
    assert [e.correlation_id for e in entries] == ["req-7", "req-7", "req-8"]
    inbox = dict(SagaInboxEntry.objects.filter(saga=saga).values_list("event_type", "message_id"))
    assert {e.event_type: e.message_id for e in entries} == inbox
    assert all(e.user == "" for e in entries)


def test_an_entry_carries_no_state_or_payload() -> None:
    columns = {field.name for field in SagaJournalEntry._meta.get_fields()}
    assert columns.isdisjoint({"state", "payload", "state_type"})


def test_a_timer_that_wakes_no_step_of_its_saga_is_a_timer_fired_entry(
    clock: FrozenDateTimeFactory,
) -> None:
    # The quote's reminders go to plain receivers (the e-mail): the saga awaits the answer.
    publish(QuoteSent("j-quote"))
    clock.tick(timedelta(days=2, seconds=1))
    with receiving(QuoteFollowUpDue) as mails:
        assert drain_due().fired == 1

    saga = _saga(QuoteFlow.saga_type, "j-quote")
    [fired] = SagaJournalEntry.objects.filter(saga=saga, kind=JournalKind.TIMER_FIRED)
    timer = SagaTimeout.objects.get(saga=saga, name="followup")
    assert (fired.via, fired.timer_name, fired.at) == (
        JournalVia.TIMER,
        "followup",
        T0 + timedelta(days=2, seconds=1),
    )
    assert (fired.event_type, fired.message_id) == (timer.event_type, timer.message_id)
    assert [envelope.message_id for envelope in mails] == [fired.message_id]
    saga.refresh_from_db()
    assert saga.step_index == 1  # it moved nothing
    assert (fired.step_before, fired.step_after, fired.version) == (None, None, None)


def test_a_timer_given_up_is_a_dead_lettered_entry(clock: FrozenDateTimeFactory) -> None:
    publish(QuoteSent("j-dead"))
    clock.tick(timedelta(days=2, seconds=1))
    with (
        override_settings(BSFT_SAGA={"DELIVERY": {"MAX_DISPATCH_ATTEMPTS": 1}}),
        receiving(QuoteFollowUpDue, fail=True),
    ):
        assert drain_due().dead_lettered == 1

    saga = _saga(QuoteFlow.saga_type, "j-dead")
    [dead] = SagaJournalEntry.objects.filter(saga=saga, kind=JournalKind.DEAD_LETTERED)
    assert (dead.via, dead.timer_name, dead.at) == (
        JournalVia.TIMER,
        "followup",
        T0 + timedelta(days=2, seconds=1),
    )
    assert not SagaJournalEntry.objects.filter(saga=saga, kind=JournalKind.TIMER_FIRED).exists()


def test_a_timer_the_catch_up_policy_discards_is_a_timer_missed_entry(
    clock: FrozenDateTimeFactory,
) -> None:
    publish(QuoteSent("j-missed"))
    clock.tick(timedelta(days=10))  # both reminders overdue by days: an outage
    policy = {"CATCH_UP_POLICY": "skip_beyond_max_age", "MAX_CATCH_UP_AGE": timedelta(days=1)}
    with override_settings(BSFT_SAGA={"TIMEOUTS": policy}), receiving(QuoteFollowUpDue) as mails:
        assert drain_due().missed == 2

    saga = _saga(QuoteFlow.saga_type, "j-missed")
    missed = SagaJournalEntry.objects.filter(saga=saga, kind=JournalKind.TIMER_MISSED)
    assert sorted(missed.values_list("timer_name", flat=True)) == ["callback", "followup"]
    assert mails == []


def test_an_event_a_step_published_that_is_given_up_is_a_dead_lettered_entry() -> None:
    with (
        override_settings(BSFT_SAGA={"DELIVERY": {"MAX_DISPATCH_ATTEMPTS": 1}}),
        receiving(ReserveStock, fail=True),
    ):
        publish(OrderPlaced("j-stock"))  # its step publishes ReserveStock through the outbox

    saga = _saga(OrderFlow.saga_type, "j-stock")
    [dead] = SagaJournalEntry.objects.filter(saga=saga, kind=JournalKind.DEAD_LETTERED)
    row = SagaOutboxMessage.objects.get(saga=saga)
    assert (dead.via, dead.event_type, dead.message_id) == (
        JournalVia.OUTBOX,
        row.event_type,
        row.pk,
    )
    assert row.dead_lettered_at is not None


def test_a_deferred_publish_is_an_entry_via_the_outbox() -> None:
    with transaction.atomic():
        publish(InvoiceSent("j-outbox"), defer=True)

    saga = _saga(InvoiceFlow.saga_type, "j-outbox")
    assert [(kind, via) for kind, via, *_ in _journal(saga)] == [
        (JournalKind.STARTED, JournalVia.OUTBOX)
    ]


def test_the_step_that_completes_the_saga_is_a_completed_entry() -> None:
    publish(ShipmentBooked("j-done"))
    publish(ShipmentDelivered("j-done"))

    saga = _saga(ShipmentFlow.saga_type, "j-done")
    assert _journal(saga)[-1][:2] == (JournalKind.COMPLETED, JournalVia.PUBLISH)


def test_a_deadline_that_expires_the_saga_is_an_expired_entry(
    clock: FrozenDateTimeFactory,
) -> None:
    publish(ShipmentBooked("j-late", express=False))
    clock.tick(STANDARD_BUDGET + timedelta(seconds=1))
    drain_due()

    saga = _saga(ShipmentFlow.saga_type, "j-late")
    assert saga.is_complete
    assert _journal(saga)[-1] == (
        JournalKind.EXPIRED,
        JournalVia.TIMER,
        DEADLINE_TIMER_NAME,
        1,
        1,
    )


def test_a_meanwhile_handler_is_a_handled_entry_that_keeps_the_step(
    clock: FrozenDateTimeFactory,
) -> None:
    publish(InvoiceIssued("j-dun"))
    clock.tick(REMINDER_INTERVAL + timedelta(days=3))  # past the business days, weekend too
    drain_due()

    saga = _saga(DunningFlow.saga_type, "j-dun")
    assert _journal(saga)[1] == (JournalKind.HANDLED, JournalVia.TIMER, "remind", 1, 1)


def test_a_kept_event_applied_at_its_step_is_an_entry_via_kept() -> None:
    publish(OrderAccepted("j-kept"))
    publish(ParcelPacked("j-kept"))  # early: kept for the step after the payment
    publish(PaymentAuthorised("j-kept"))
    publish(NoteAdded("j-kept", "fragile"))

    saga = _saga(FulfilmentFlow.saga_type, "j-kept")
    assert [(kind, via, before, after) for kind, via, _, before, after in _journal(saga)] == [
        (JournalKind.STARTED, JournalVia.PUBLISH, None, 1),
        (JournalKind.ADVANCED, JournalVia.PUBLISH, 1, 2),
        (JournalKind.ADVANCED, JournalVia.KEPT, 2, 3),
        (JournalKind.HANDLED, JournalVia.PUBLISH, 3, 3),
    ]


def test_operator_actions_are_entries_naming_the_operator(clock: FrozenDateTimeFactory) -> None:
    operator = get_user_model().objects.create_user("night-shift")
    for key in ("j-op-1", "j-op-2"):
        publish(InvoiceSent(key, remind_after_seconds=3600))
    first, second = _saga(InvoiceFlow.saga_type, "j-op-1"), _saga(InvoiceFlow.saga_type, "j-op-2")
    timer = SagaTimeout.objects.get(saga=first)

    clock.tick(timedelta(seconds=10))
    assert reschedule_timer(timer.pk, T0 + timedelta(hours=2), user=operator).refused is None
    fire_now([timer.pk], user=operator)
    assert cancel_timers([timer.pk], user=operator).canceled == [timer.pk]
    assert terminate([second.pk], reason="duplicate order").terminated == [second.pk]

    ops = [
        (e.kind, e.via, e.timer_name, e.user, e.at)
        for e in SagaJournalEntry.objects.filter(saga=first, via=JournalVia.OPERATOR).order_by("id")
    ]
    moment = T0 + timedelta(seconds=10)
    assert ops == [
        (JournalKind.TIMER_RESCHEDULED, JournalVia.OPERATOR, "reminder", "night-shift", moment),
        (JournalKind.FIRED_NOW, JournalVia.OPERATOR, "reminder", "night-shift", moment),
        (JournalKind.TIMER_CANCELED, JournalVia.OPERATOR, "reminder", "night-shift", moment),
    ]
    # Each names the timer's event: what it publishes when it fires.
    events = SagaJournalEntry.objects.filter(saga=first, via=JournalVia.OPERATOR)
    assert set(events.values_list("event_type", "message_id", "correlation_id")) == {
        (timer.event_type, timer.message_id, timer.correlation_id)
    }
    [ended] = SagaJournalEntry.objects.filter(saga=second, kind=JournalKind.TERMINATED)
    assert (ended.via, ended.user, ended.step_before, ended.step_after, ended.version) == (
        JournalVia.OPERATOR,
        "",  # terminated from code: no operator to name
        1,
        1,
        2,
    )


def test_a_requeued_dead_letter_is_an_entry(clock: FrozenDateTimeFactory) -> None:
    publish(InvoiceSent("j-requeue", remind_after_seconds=0))
    saga = _saga(InvoiceFlow.saga_type, "j-requeue")
    SagaTimeout.objects.filter(saga=saga).update(
        dispatched_at=T0, outcome=TimeoutOutcome.DEAD_LETTERED, dead_lettered_at=T0
    )
    timer = SagaTimeout.objects.get(saga=saga)

    requeue_dead_lettered([timer.pk])

    [entry] = SagaJournalEntry.objects.filter(saga=saga, kind=JournalKind.REQUEUED)
    assert (entry.via, entry.timer_name, entry.step_before) == (JournalVia.OPERATOR, "reminder", 1)
    assert (entry.event_type, entry.message_id) == (timer.event_type, timer.message_id)


def test_a_refused_action_writes_no_entry() -> None:
    publish(InvoiceSent("j-refused", remind_after_seconds=0))
    saga = _saga(InvoiceFlow.saga_type, "j-refused")
    timer = SagaTimeout.objects.get(saga=saga)
    drain_due()  # fired: no longer pending

    assert cancel_timers([timer.pk]).refused
    assert reschedule_timer(timer.pk, T0).refused

    assert not SagaJournalEntry.objects.filter(saga=saga, via=JournalVia.OPERATOR).exists()


def test_a_window_that_rolls_back_leaves_no_entry() -> None:
    publish(InvoiceSent("j-rollback"))
    saga = _saga(InvoiceFlow.saga_type, "j-rollback")

    def terminate_then_fail() -> None:
        with transaction.atomic():
            terminate([saga.pk], reason="changed my mind")
            raise RuntimeError("the caller's transaction fails")

    with pytest.raises(RuntimeError):
        terminate_then_fail()

    assert not SagaJournalEntry.objects.filter(saga=saga, kind=JournalKind.TERMINATED).exists()
    assert SagaJournalEntry.objects.filter(saga=saga).count() == 1


def test_every_handled_event_has_exactly_one_entry(clock: FrozenDateTimeFactory) -> None:
    # Transitions and inbox rows are written together, or not at all: they match one to one.
    for n in range(5):
        publish(InvoiceSent(f"j-many-{n}", remind_after_seconds=n))
        publish(InvoiceSent(f"j-many-{n}"))  # a duplicate start: ignored, no entry
    clock.tick(timedelta(seconds=10))
    drain_due()
    for n in range(0, 5, 2):
        publish(InvoicePaid(f"j-many-{n}"))

    transitions = SagaJournalEntry.objects.exclude(via=JournalVia.OPERATOR)
    assert transitions.count() == SagaInboxEntry.objects.count() == 5 + 5 + 3
    assert set(transitions.values_list("saga_id", "message_id")) == set(
        SagaInboxEntry.objects.values_list("saga_id", "message_id")
    )
