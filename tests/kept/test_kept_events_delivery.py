"""Kept events on a bad day: a chain of keeping steps, rows for a step already passed, a
step body that keeps failing, a flood of early events, an event that arrives before its
saga starts, and the journal's versions."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.test import Client, override_settings
from django.urls import reverse
from django.utils import timezone
from freezegun import freeze_time
from freezegun.api import FrozenDateTimeFactory

from bsft_saga import publish
from bsft_saga.conf import saga_settings, validate
from bsft_saga.delivery.claim import ABANDONED
from bsft_saga.draining import drain_round
from bsft_saga.engine import handler
from bsft_saga.models import (
    JournalKind,
    JournalVia,
    SagaAuditRecord,
    SagaInstance,
    SagaJournalEntry,
    SagaKeptEvent,
)
from bsft_saga.retention import erase_saga_data
from bsft_saga.status import saga_status
from tests.support.timer_fixtures import T0
from tests.testapp import kept_flows
from tests.testapp.branch_events import OrderAccepted, ParcelDelivered, ParcelPacked
from tests.testapp.branch_events import PaymentAuthorised as Paid
from tests.testapp.branch_flows import FulfilmentFlow
from tests.testapp.kept_events import Gate, InvoiceIssued, Item, Opened, PaymentReceived
from tests.testapp.kept_flows import ChainFlow, InvoiceFlow

pytestmark = pytest.mark.django_db(transaction=True)

RETRIES = {"DELIVERY": {"MAX_DISPATCH_ATTEMPTS": 3, "RETRY_BACKOFF": 10, "MAX_RETRY_DELAY": 60}}


@pytest.fixture
def ignored(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    counted: list[tuple[str, str]] = []
    real = handler.telemetry.count_ignored

    def count(saga_type: str, reason: str) -> None:
        real(saga_type, reason)  # still refuses an unknown reason
        counted.append((saga_type, reason))

    monkeypatch.setattr("bsft_saga.telemetry.count_ignored", count)
    return counted


@pytest.fixture
def failing() -> Iterator[set[str]]:
    yield kept_flows.FAILING
    kept_flows.FAILING.clear()
    kept_flows.ON_TAKE.clear()


@pytest.fixture
def clock() -> Iterator[FrozenDateTimeFactory]:
    with freeze_time(T0) as frozen:
        assert isinstance(frozen, FrozenDateTimeFactory)  # not ticking
        yield frozen


def chain(key: str) -> SagaInstance:
    return SagaInstance.objects.get(saga_type=ChainFlow.saga_type, correlation_key=key)


def invoice(key: str) -> SagaInstance:
    return SagaInstance.objects.get(saga_type=InvoiceFlow.saga_type, correlation_key=key)


# -- a chain of keeping steps ------------------------------------------------------------------


def test_two_items_kept_for_two_keeping_steps_are_both_applied_oldest_first() -> None:
    publish(Opened("c-1"))
    publish(Item("c-1", n=2))
    publish(Item("c-1", n=1))
    assert SagaKeptEvent.objects.count() == 2

    publish(Gate("c-1"))

    saga = chain("c-1")
    assert saga.is_complete
    assert saga.state["items"] == [2, 1]
    assert not SagaKeptEvent.objects.exists()
    # Each in a window of its own: one journal entry each, delivered as kept events.
    kept = SagaJournalEntry.objects.filter(saga=saga, via=JournalVia.KEPT).order_by("id")
    assert [(e.step_before, e.step_after) for e in kept] == [(2, 3), (3, 4)]


def test_a_kept_item_waits_for_the_next_keeping_step_while_a_drain_passes() -> None:
    publish(Opened("c-2"))
    publish(Item("c-2", n=1))
    publish(Gate("c-2"))
    publish(Item("c-2", n=2))  # awaited now: applied at once
    drain_round()

    assert chain("c-2").state["items"] == [1, 2]
    assert chain("c-2").is_complete


# -- rows for a step already passed ------------------------------------------------------------


def test_49_of_50_early_parcels_are_discarded_when_the_saga_moves_past_their_step(
    ignored: list[tuple[str, str]],
) -> None:
    publish(OrderAccepted("o-50"))
    for n in range(50):
        publish(ParcelPacked("o-50", parcel=f"p-{n}"))
    assert saga_status().events_kept == 50
    ignored.clear()

    publish(Paid("o-50"))

    saga = SagaInstance.objects.get(saga_type=FulfilmentFlow.saga_type, correlation_key="o-50")
    assert saga.step_index == 3
    assert saga.state["log"] == ["OrderAccepted", "PaymentAuthorised", "ParcelPacked"]
    assert not SagaKeptEvent.objects.exists()
    assert saga_status().events_kept == 0
    assert ignored == [(FulfilmentFlow.saga_type, "not_awaited")] * 49
    publish(ParcelDelivered("o-50"))
    assert SagaInstance.objects.get(pk=saga.pk).is_complete


# -- a step body that keeps failing --------------------------------------------------------


def test_a_failing_kept_event_backs_off_and_is_dead_lettered_then_requeued(
    clock: FrozenDateTimeFactory, failing: set[str], caplog: pytest.LogCaptureFixture
) -> None:
    failing.add("r-1")
    with override_settings(BSFT_SAGA=RETRIES):
        publish(Opened("r-1"))
        publish(Item("r-1", n=7, fail=True))
        with caplog.at_level(logging.ERROR, logger="bsft_saga.engine.handler"):
            publish(Gate("r-1"))  # reaches the step: the kept item fails there
            drain_round()  # within the back-off: not tried again, nothing logged again
            drain_round()
        row = SagaKeptEvent.objects.get()
        assert (row.attempts, chain("r-1").step_index) == (1, 2)
        assert row.next_attempt_at is not None
        assert timedelta(seconds=8) <= row.next_attempt_at - T0 <= timedelta(seconds=10)
        assert "cannot be taken" in row.last_error
        assert [r.levelname for r in caplog.records] == ["ERROR"]
        assert row.status().value == "retrying"

        clock.tick(timedelta(seconds=10))
        drain_round()
        row.refresh_from_db()
        assert row.attempts == 2
        assert (
            timedelta(seconds=16) <= row.next_attempt_at - timezone.now() <= timedelta(seconds=20)
        )

        clock.tick(timedelta(seconds=20))
        drain_round()
        row.refresh_from_db()
        assert (row.attempts, row.dead_lettered_at) == (3, timezone.now())
        status = saga_status()
        assert (status.kept_dead_lettered, status.events_kept) == (1, 0)
        assert status.as_dict()["kept_dead_lettered"] == 1
        [dead] = SagaJournalEntry.objects.filter(kind=JournalKind.DEAD_LETTERED)
        assert (dead.saga_id, dead.via, dead.message_id) == (
            row.saga_id,
            JournalVia.KEPT,
            row.message_id,
        )
        text = StringIO()
        call_command("saga_status", stdout=text)
        assert "kept_dead_lettered" in text.getvalue()

        failing.clear()  # the cause is fixed
        out = StringIO()
        call_command("requeue_saga_kept_events", "--all", stdout=out)
        assert "Requeued 1 dead-lettered kept event(s)." in out.getvalue()
        assert SagaAuditRecord.objects.filter(action="saga.kept.requeued").count() == 1
        assert SagaJournalEntry.objects.filter(kind=JournalKind.REQUEUED).count() == 1
        drain_round()

    saga = chain("r-1")
    assert saga.state["items"] == [7]
    assert saga.step_index == 3
    assert not SagaKeptEvent.objects.exists()


class Killed(BaseException):
    """The process dies while a step body runs: nothing after the claim is written."""


def _die() -> None:
    raise Killed


def test_a_kept_event_that_kills_every_process_applying_it_is_dead_lettered(
    clock: FrozenDateTimeFactory, failing: set[str]
) -> None:
    lease = saga_settings.delivery.claim_lease + timedelta(seconds=1)
    with override_settings(BSFT_SAGA=RETRIES):
        publish(Opened("k-1"))
        publish(Item("k-1", n=1))
        publish(Item("k-1", n=2))
        kept_flows.ON_TAKE["k-1"] = _die
        with pytest.raises(Killed):
            publish(Gate("k-1"))  # the process applying the first kept item dies
        for attempts in (1, 2):  # every process that applies it once its claim ran out
            clock.tick(lease)
            with pytest.raises(Killed):
                drain_round()
            first = SagaKeptEvent.objects.order_by("id").first()
            assert first is not None
            assert (first.attempts, first.last_error) == (attempts, ABANDONED)

        del kept_flows.ON_TAKE["k-1"]  # only the second item still to be applied is harmless
        clock.tick(lease)
        drain_round()  # the first is given up at the limit: the second goes

    [dead] = SagaKeptEvent.objects.all()
    assert (dead.attempts, dead.last_error, dead.dead_lettered_at) == (3, ABANDONED, T0 + 3 * lease)
    assert chain("k-1").state["items"] == [2]
    assert saga_status().kept_dead_lettered == 1
    [entry] = SagaJournalEntry.objects.filter(kind=JournalKind.DEAD_LETTERED)
    assert (entry.via, entry.message_id) == (JournalVia.KEPT, dead.message_id)


def test_requeue_by_id_names_a_row_that_is_not_dead_lettered() -> None:
    publish(Opened("r-2"))
    publish(Item("r-2", n=1))
    row = SagaKeptEvent.objects.get()
    with pytest.raises(Exception, match="not requeued"):
        call_command("requeue_saga_kept_events", str(row.pk), stdout=StringIO(), stderr=StringIO())


def test_a_failing_saga_takes_no_other_sagas_place_in_a_pass(
    failing: set[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Three failing sagas, older than a healthy one whose kept item a crash left behind.
    for key in ("f-1", "f-2", "f-3"):
        failing.add(key)
        publish(Opened(key))
        publish(Item(key, fail=True))
    publish(Opened("ok"))
    publish(Item("ok", n=1))
    monkeypatch.setattr(handler, "apply_kept", lambda flow, saga_id: 0)
    for key in ("f-1", "f-2", "f-3", "ok"):
        publish(Gate(key))
    monkeypatch.undo()

    handler.apply_stragglers(limit=2)

    assert chain("ok").state["items"] == [1]
    assert sorted(SagaKeptEvent.objects.values_list("attempts", flat=True)) == [1, 1, 1]


def test_the_admin_lists_one_sagas_kept_events_and_requeues_them(failing: set[str]) -> None:
    failing.add("a-1")
    with override_settings(BSFT_SAGA={"DELIVERY": {"MAX_DISPATCH_ATTEMPTS": 1}}):
        publish(Opened("a-1"))
        publish(Item("a-1", n=3, fail=True))
        publish(Gate("a-1"))
    publish(Opened("a-2"))
    publish(Item("a-2", n=4))
    row = SagaKeptEvent.objects.get(saga__correlation_key="a-1")
    assert row.dead_lettered_at is not None
    admin = get_user_model().objects.create_superuser("ops", "ops@example.com", "pw")
    client = Client()
    client.force_login(admin)
    url = reverse("admin:bsft_saga_sagakeptevent_changelist")

    page = client.get(url, {"saga__id__exact": str(row.saga_id)})
    assert page.status_code == 200
    assert page.context["cl"].result_count == 1
    assert "dead-lettered" in page.content.decode()

    failing.clear()
    done = client.post(
        url, {"action": "requeue_kept_events", "_selected_action": [str(row.pk)]}, follow=True
    )
    assert "1 dead-lettered kept event was requeued" in done.content.decode()
    record = SagaAuditRecord.objects.get(action="saga.kept.requeued")
    assert (record.username, record.instance_id) == ("ops", row.saga_id)
    drain_round()
    assert chain("a-1").state["items"] == [3]


def test_a_kept_event_its_saga_handled_meanwhile_is_dropped_and_the_next_one_applied(
    ignored: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    publish(Opened("d-1"))
    first = publish(Item("d-1", n=1))
    publish(Item("d-1", n=2))
    with monkeypatch.context() as patched:
        patched.setattr(handler, "apply_kept", lambda flow, saga_id: 0)
        publish(Gate("d-1"))  # the process dies before it applies the kept items
    ignored.clear()

    # The first item is redelivered and handled at the step; its kept row is a duplicate.
    publish(Item("d-1", n=1), message_id=first.message_id)

    assert chain("d-1").state["items"] == [1, 2]
    assert chain("d-1").is_complete
    assert not SagaKeptEvent.objects.exists()
    assert ignored == [(ChainFlow.saga_type, "duplicate")]


# -- one saga's apply leaves no other saga's kept events behind ------------------------------


def test_applying_one_sagas_kept_event_applies_another_sagas_it_reaches(
    failing: set[str],
) -> None:
    publish(Opened("b"))
    publish(Item("b", n=20))
    publish(Opened("a"))
    publish(Item("a", n=10))
    # Taking a's kept item publishes the gate of b, whose kept item is then applied too.
    kept_flows.ON_TAKE["a"] = lambda: publish(Gate("b"))

    publish(Gate("a"))

    assert chain("a").state["items"] == [10]
    assert chain("b").state["items"] == [20]
    assert not SagaKeptEvent.objects.exists()


# -- bounds ----------------------------------------------------------------------------------


def test_an_early_event_beyond_the_limit_is_ignored_and_logged_never_an_error(
    ignored: list[tuple[str, str]], caplog: pytest.LogCaptureFixture
) -> None:
    publish(OrderAccepted("o-lim"))
    with (
        override_settings(BSFT_SAGA={"ENGINE": {"MAX_KEPT_EVENTS_PER_SAGA": 2}}),
        caplog.at_level(logging.WARNING, logger="bsft_saga.engine.handler"),
    ):
        for n in range(3):
            publish(ParcelPacked("o-lim", parcel=f"p-{n}"))

    assert SagaKeptEvent.objects.count() == 2
    assert ignored[-1] == (FulfilmentFlow.saga_type, "kept_limit")
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "MAX_KEPT_EVENTS_PER_SAGA" in warning.getMessage()


def test_the_engine_settings_of_kept_events_are_validated() -> None:
    assert saga_settings.engine.max_kept_events_per_saga == 1000
    assert saga_settings.engine.keep_early_for == timedelta(days=1)
    problems = validate({"ENGINE": {"MAX_KEPT_EVENTS_PER_SAGA": 0, "KEEP_EARLY_FOR": -5}})
    assert {p.path for p in problems} == {
        "ENGINE.MAX_KEPT_EVENTS_PER_SAGA",
        "ENGINE.KEEP_EARLY_FOR",
    }
    with (
        override_settings(BSFT_SAGA={"ENGINE": {"KEEP_EARLY_FOR": "a day"}}),
        pytest.raises(ImproperlyConfigured, match="KEEP_EARLY_FOR"),
    ):
        saga_settings.engine.keep_early_for  # noqa: B018


# -- an event that arrives before its saga ---------------------------------------------------


def test_a_payment_published_a_moment_before_its_invoice_is_applied_when_the_saga_starts(
    ignored: list[tuple[str, str]],
) -> None:
    payment = publish(PaymentReceived("INV-2"))
    publish(PaymentReceived("INV-2"), message_id=payment.message_id)  # redelivered: kept once
    [row] = SagaKeptEvent.objects.all()
    assert (row.saga_id, row.saga_type, row.correlation_key) == (
        None,
        InvoiceFlow.saga_type,
        "INV-2",
    )
    assert saga_status().events_kept == 1
    assert ignored == [(InvoiceFlow.saga_type, "duplicate")]

    publish(InvoiceIssued("INV-2"))

    saga = invoice("INV-2")
    assert saga.is_complete
    assert saga.state["paid"] is True
    assert not SagaKeptEvent.objects.exists()
    # A second invoice of the key later starts a saga of its own, which that payment
    # already paid for: it waits.
    publish(InvoiceIssued("INV-2"))
    assert SagaInstance.objects.active().get(saga_type=InvoiceFlow.saga_type).state["paid"] is False


def test_an_event_kept_for_a_saga_that_never_starts_is_discarded_after_the_window(
    clock: FrozenDateTimeFactory, ignored: list[tuple[str, str]]
) -> None:
    publish(PaymentReceived("INV-3"))
    clock.tick(timedelta(hours=23))
    drain_round()
    assert SagaKeptEvent.objects.count() == 1

    clock.tick(timedelta(hours=2))
    ignored.clear()
    drain_round()

    assert not SagaKeptEvent.objects.exists()
    assert ignored == [(InvoiceFlow.saga_type, "not_awaited")]
    publish(InvoiceIssued("INV-3"))
    assert invoice("INV-3").state["paid"] is False


def test_a_saga_started_past_the_window_does_not_take_the_old_event(
    clock: FrozenDateTimeFactory,
) -> None:
    with override_settings(BSFT_SAGA={"ENGINE": {"KEEP_EARLY_FOR": 60}}):
        publish(PaymentReceived("INV-4"))
        clock.tick(timedelta(seconds=61))
        publish(InvoiceIssued("INV-4"))  # no drain ran in between

        assert invoice("INV-4").state["paid"] is False
        drain_round()
    assert not SagaKeptEvent.objects.exists()


def test_an_event_kept_while_its_saga_was_starting_is_handed_to_it_by_the_drain() -> None:
    publish(InvoiceIssued("INV-5"))
    # As if kept by a process that had not seen the saga's creation commit yet.
    publish(PaymentReceived("INV-6"))
    SagaKeptEvent.objects.update(correlation_key="INV-5")

    drain_round()

    assert invoice("INV-5").state["paid"] is True
    assert not SagaKeptEvent.objects.exists()


def test_erasing_a_key_erases_the_events_kept_for_it_before_its_saga_started() -> None:
    publish(PaymentReceived("INV-7"))
    publish(PaymentReceived("INV-8"))

    report = erase_saga_data(InvoiceFlow.saga_type, "INV-7")

    assert report.rows.kept == 1
    assert list(SagaKeptEvent.objects.values_list("correlation_key", flat=True)) == ["INV-8"]


# -- the journal -------------------------------------------------------------------------------


def test_keeping_an_event_takes_no_version_the_journal_does_not_show() -> None:
    publish(OrderAccepted("o-v"))
    publish(ParcelPacked("o-v"))
    publish(Paid("o-v"))

    saga = SagaInstance.objects.get(saga_type=FulfilmentFlow.saga_type, correlation_key="o-v")
    versions = list(
        SagaJournalEntry.objects.filter(saga=saga).order_by("id").values_list("version", flat=True)
    )
    assert versions == [1, 2, 3]
    assert saga.version == 3


def test_the_requeue_action_needs_the_change_permission_of_kept_events() -> None:
    publish(Opened("p-1"))
    publish(Item("p-1", n=1))
    viewer = get_user_model().objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_sagakeptevent"))
    client = Client()
    client.force_login(viewer)

    page = client.get(reverse("admin:bsft_saga_sagakeptevent_changelist"))

    assert page.status_code == 200
    assert page.context["cl"].result_count == 1
    assert "requeue_kept_events" not in page.content.decode()
