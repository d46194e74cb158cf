"""``keep_early=True``: an event that reaches a saga before the step awaiting it is kept,
and applied right after the commit that reaches that step."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from bsft_saga import publish
from bsft_saga.draining import drain_round
from bsft_saga.engine import handler
from bsft_saga.engine.termination import terminate
from bsft_saga.models import SagaInboxEntry, SagaInstance, SagaKeptEvent, SagaOutboxMessage
from bsft_saga.retention import erase_saga_data
from bsft_saga.status import saga_status
from bsft_saga.testing import SagaHarness
from tests.support.timer_fixtures import T0
from tests.testapp.branch_events import (
    NoteAdded,
    OrderAccepted,
    OrderWithdrawn,
    ParcelDelivered,
    ParcelPacked,
    PaymentAuthorised,
)
from tests.testapp.branch_flows import FulfilmentFlow

pytestmark = pytest.mark.django_db(transaction=True)


def saga(order_id: str) -> SagaInstance:
    return SagaInstance.objects.get(saga_type=FulfilmentFlow.saga_type, correlation_key=order_id)


def test_a_parcel_packed_before_the_payment_is_kept_and_applied_once_the_step_is_reached() -> None:
    publish(OrderAccepted("o-1"))
    packed = publish(ParcelPacked("o-1", parcel="p-1"), correlation_id="conv-1")

    [kept] = SagaKeptEvent.objects.all()
    assert (kept.event_type, kept.message_id, kept.step_index) == (
        "tests.branch.parcel-packed",
        packed.message_id,
        2,
    )
    assert kept.correlation_id == "conv-1"
    assert saga("o-1").step_index == 1

    publish(PaymentAuthorised("o-1"))

    instance = saga("o-1")
    assert instance.step_index == 3
    assert instance.state["log"] == ["OrderAccepted", "PaymentAuthorised", "ParcelPacked"]
    assert not SagaKeptEvent.objects.exists()
    assert SagaInboxEntry.objects.filter(saga=instance, message_id=packed.message_id).exists()


def test_a_redelivered_early_event_is_kept_once() -> None:
    publish(OrderAccepted("o-2"))
    envelope = publish(ParcelPacked("o-2"))
    publish(ParcelPacked("o-2"), message_id=envelope.message_id)

    assert SagaKeptEvent.objects.count() == 1
    publish(PaymentAuthorised("o-2"))
    publish(ParcelPacked("o-2"), message_id=envelope.message_id)  # now a duplicate

    assert saga("o-2").state["log"].count("ParcelPacked") == 1


def test_kept_events_are_applied_oldest_first_each_in_its_own_window() -> None:
    publish(OrderAccepted("o-3"))
    publish(ParcelPacked("o-3", parcel="first"))
    publish(OrderWithdrawn("o-3"))  # also kept: the step keeps both types

    publish(PaymentAuthorised("o-3"))

    instance = saga("o-3")
    # The parcel moved the saga on; no later step awaits the withdrawal: the commit that
    # moved past its step discarded it.
    assert instance.state["log"][-1] == "ParcelPacked"
    assert instance.step_index == 3
    assert not SagaKeptEvent.objects.exists()
    publish(ParcelDelivered("o-3"))
    assert saga("o-3").is_complete
    assert not SagaKeptEvent.objects.exists()


def test_a_kept_event_of_a_saga_that_completes_first_is_discarded_and_counted_ignored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    counted: list[tuple[str, str]] = []
    monkeypatch.setattr(
        "bsft_saga.telemetry.count_ignored",
        lambda saga_type, reason: counted.append((saga_type, reason)),
    )
    publish(OrderAccepted("o-4"))
    publish(ParcelPacked("o-4"))
    publish(OrderWithdrawn("o-4"))
    counted.clear()
    # The withdrawal, applied first, completes the saga before the parcel's turn.
    SagaKeptEvent.objects.filter(event_type="tests.branch.parcel-packed").update(
        kept_at=F("kept_at") + timedelta(hours=1)
    )
    publish(PaymentAuthorised("o-4"))

    assert saga("o-4").is_complete
    assert saga("o-4").state["log"][-1] == "OrderWithdrawn"
    assert not SagaKeptEvent.objects.exists()
    assert counted == [(FulfilmentFlow.saga_type, "not_awaited")]


def test_a_kept_event_left_behind_by_a_crash_is_applied_by_the_drain(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    publish(OrderAccepted("o-5"))
    publish(ParcelPacked("o-5"))
    # The process dies between the commit that reaches the step and the apply.
    monkeypatch.setattr(handler, "apply_kept", lambda flow, saga_id: 0)
    publish(PaymentAuthorised("o-5"))
    monkeypatch.undo()
    assert saga("o-5").step_index == 2
    assert SagaKeptEvent.objects.count() == 1

    drain_round()

    assert saga("o-5").step_index == 3
    assert not SagaKeptEvent.objects.exists()


def test_a_step_reached_by_a_pass_applies_its_kept_events_after_the_pass_commits() -> None:
    publish(OrderAccepted("o-6"))
    publish(ParcelPacked("o-6"))
    # A delayed message: only the drain's outbox pass delivers it, staging its window.
    publish(PaymentAuthorised("o-6"), delay=timedelta(minutes=5))
    SagaOutboxMessage.objects.update(deliver_at=timezone.now() - timedelta(seconds=1))
    assert saga("o-6").step_index == 1

    report = drain_round()

    assert report.outbox.delivered == 1
    instance = saga("o-6")
    assert instance.step_index == 3
    assert instance.state["log"][-1] == "ParcelPacked"
    assert not SagaKeptEvent.objects.exists()


def test_kept_events_work_under_the_harness() -> None:
    with SagaHarness(start=T0) as harness:
        harness.publish(OrderAccepted("o-10"))
        harness.publish(ParcelPacked("o-10"))
        harness.publish(PaymentAuthorised("o-10"))
        assert harness.state(FulfilmentFlow, "o-10").log[-1] == "ParcelPacked"


def test_an_event_no_later_step_keeps_is_still_ignored() -> None:
    publish(OrderAccepted("o-7"))
    publish(ParcelDelivered("o-7"))  # step 3 awaits it without keep_early

    assert not SagaKeptEvent.objects.exists()
    assert saga("o-7").step_index == 1


def test_an_ignored_event_and_a_plain_step_read_no_kept_rows() -> None:
    publish(OrderAccepted("o-8"))
    with CaptureQueriesContext(connection) as captured:
        publish(ParcelDelivered("o-8"))  # ignored: one lookup, nothing else
    assert not any("kept" in q["sql"] for q in captured.captured_queries)


def test_the_migrations_match_the_models() -> None:
    call_command("makemigrations", "bsft_saga", "--check", "--dry-run", verbosity=0)


def test_a_note_meanwhile_does_not_move_the_step() -> None:
    publish(OrderAccepted("o-9"))
    publish(PaymentAuthorised("o-9"))
    publish(ParcelPacked("o-9"))
    before = saga("o-9")
    publish(NoteAdded("o-9", text="fragile"))
    after = saga("o-9")
    assert (after.step_index, after.version) == (before.step_index, before.version + 1)
    assert after.state["log"][-1] == "fragile"
    assert uuid.UUID(str(after.pk)) == before.pk


def test_saga_status_counts_the_kept_events() -> None:
    publish(OrderAccepted("o-11"))
    publish(ParcelPacked("o-11"))

    assert saga_status().events_kept == 1
    assert saga_status().as_dict()["events_kept"] == 1


def test_a_purged_or_erased_instance_takes_its_kept_events_along() -> None:
    publish(OrderAccepted("o-12"))
    publish(ParcelPacked("o-12"))

    report = erase_saga_data(FulfilmentFlow.saga_type, "o-12", include_active=True)

    assert report.rows.kept == 1
    assert not SagaInstance.objects.filter(correlation_key="o-12").exists()
    assert not SagaKeptEvent.objects.exists()


def test_terminating_a_saga_discards_its_kept_events_and_counts_them_ignored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    counted: list[tuple[str, str]] = []
    monkeypatch.setattr(
        "bsft_saga.telemetry.count_ignored",
        lambda saga_type, reason: counted.append((saga_type, reason)),
    )
    publish(OrderAccepted("o-term"))
    publish(ParcelPacked("o-term"))
    counted.clear()

    report = terminate([saga("o-term").pk], reason="canceled by phone")

    assert report.refused == []
    assert not SagaKeptEvent.objects.exists()
    assert counted == [(FulfilmentFlow.saga_type, "not_awaited")]
