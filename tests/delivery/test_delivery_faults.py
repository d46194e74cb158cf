"""Faults stay contained: one row's trouble never aborts a pass or a delivery.

Each of these used to escape: failure text PostgreSQL refuses (NUL) or no encoder accepts
(a lone surrogate) made the bookkeeping raise and the rest of the batch wait for its lease;
the same text in an after-commit delivery raised out of ``publish()`` after the saga had
committed; ``fire_latest_per_saga`` raised ``KeyError`` when a claimed row was canceled
before the policy looked; a fresh process did not know the deadline event's type.
"""

from __future__ import annotations

import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings
from django.utils import timezone
from freezegun import freeze_time
from freezegun.api import FrozenDateTimeFactory

from bsft_saga import publish
from bsft_saga.models import SagaOutboxMessage
from bsft_saga.signals import event_published
from bsft_saga.timeouts import DrainReport, drain_due
from bsft_saga.timeouts import store as timer_store
from tests.support.services import require_postgres_backend
from tests.support.timer_fixtures import T0
from tests.testapp.events import (
    OrderPlaced,
    QuoteCallbackDue,
    QuoteFollowUpDue,
    QuoteSent,
    ReserveStock,
    TransferRequested,
)
from tests.testapp.timer_flows import QuoteFlow, TransferFlow, the_saga, timers_of

ROOT = Path(__file__).resolve().parents[2]


class GatewayError(Exception):
    pass


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("this exception cannot say what went wrong")


def send_quotes(clock: FrozenDateTimeFactory, *keys: str) -> None:
    for key in keys:
        publish(QuoteSent(key))
        clock.tick(timedelta(minutes=1))


def last_error(key: str, name: str) -> str:
    return next(row.last_error for row in timers_of(QuoteFlow, key) if row.name == name)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("exception", "stored"),
    [
        (GatewayError("card 4711\x00 refused"), "GatewayError: card 4711\ufffd refused"),
        (GatewayError("name J\udcf6rg"), "GatewayError: name J\ufffdrg"),
        (Unprintable(), "Unprintable: <the exception's message could not be rendered>"),
    ],
    ids=["nul", "lone-surrogate", "broken-str"],
)
def test_a_failure_whose_text_cannot_be_stored_is_recorded_and_the_pass_goes_on(
    clock: FrozenDateTimeFactory, record: Any, exception: Exception, stored: str
) -> None:
    mailer = record(QuoteFollowUpDue, QuoteCallbackDue)
    mailer.fail_with = exception
    mailer.fail_if = lambda envelope: envelope.event == QuoteFollowUpDue("q-1")
    send_quotes(clock, "q-1", "q-2")
    clock.move_to(T0 + timedelta(days=5))

    report = drain_due()

    assert (report.fired, report.failed) == (3, 1)
    assert last_error("q-1", "followup") == stored


@pytest.mark.django_db(transaction=True)
def test_an_after_commit_delivery_whose_failure_text_holds_nul_does_not_raise_into_publish(
    record: Any,
) -> None:
    warehouse = record(ReserveStock)
    warehouse.fail_with = ConnectionError("warehouse\x00unreachable")

    publish(OrderPlaced("o-1"))  # the step commits; delivering its ReserveStock fails

    assert len(warehouse.envelopes) == 1
    row = SagaOutboxMessage.objects.get()
    assert (row.delivered_at, row.attempts) == (None, 1)
    assert row.last_error == "ConnectionError: warehouse\ufffdunreachable"


@pytest.mark.django_db
def test_a_receiver_that_swallows_a_database_error_fails_only_its_own_timer(
    clock: FrozenDateTimeFactory, record: Any
) -> None:
    # PostgreSQL aborts the transaction on any error; a receiver that catches it leaves the
    # timer's savepoint unreleasable. That timer fails; the batch goes on.
    require_postgres_backend()

    def swallow(sender: type, *, envelope: Any, **kwargs: Any) -> None:
        if envelope.event == QuoteFollowUpDue("q-1"):
            try:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT 1 / 0")
            except Exception:
                pass

    mailer = record(QuoteFollowUpDue, QuoteCallbackDue)
    event_published.connect(swallow, dispatch_uid="tests.swallow", weak=False)
    try:
        send_quotes(clock, "q-1", "q-2")
        clock.move_to(T0 + timedelta(days=5))
        report = drain_due()
    finally:
        event_published.disconnect(dispatch_uid="tests.swallow")

    assert (report.fired, report.failed) == (3, 1)
    assert "current transaction is aborted" in last_error("q-1", "followup")
    assert len(mailer.envelopes) == 4


@pytest.mark.django_db
@override_settings(BSFT_SAGA={"TIMEOUTS": {"CATCH_UP_POLICY": "fire_latest_per_saga"}})
def test_fire_latest_per_saga_tolerates_timers_canceled_while_it_looks(
    clock: FrozenDateTimeFactory, record: Any
) -> None:
    reminders = record(QuoteFollowUpDue, QuoteCallbackDue)
    send_quotes(clock, "q-1", "q-2")
    clock.move_to(T0 + timedelta(days=5))
    gone = the_saga(QuoteFlow, "q-1")

    def cancel_q1_first(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if "MAX(" in sql and "bsft_saga_sagatimeout" in sql:  # the policy's query
            timer_store.cancel_all(gone.pk, now=timezone.now())
        return execute(sql, params, many, context)

    with connection.execute_wrapper(cancel_q1_first):
        report = drain_due()

    # q-1's two timers were claimed, then canceled: not fired, counted as taken by others.
    assert report == DrainReport(fired=1, missed=1, unclaimed=2)
    assert reminders.events == [QuoteCallbackDue("q-2")]


# --- every process knows every event type ---------------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_fresh_process_knows_bsft_sagas_and_every_installed_apps_event_types(
    subprocess_env: dict[str, str], python: str
) -> None:
    code = (
        "import django; django.setup()\n"
        "from bsft_saga.events.registry import event_class\n"
        "print(event_class('bsft_saga.deadline-expired').__name__)\n"
        "print(event_class('tests.eventsapp.invoice-overdue').__name__)\n"
    )
    result = subprocess.run(
        [python, "-c", code], env=subprocess_env, capture_output=True, text=True, timeout=120
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["DeadlineExpired", "InvoiceOverdue"]


@pytest.mark.slow
def test_a_fresh_drain_process_fires_a_deadline_timer(
    subprocess_env: dict[str, str], python: str
) -> None:
    with freeze_time(timezone.now() - timedelta(minutes=31)):
        publish(TransferRequested("tr-fresh"))  # its 30-minute deadline passed a minute ago

    result = subprocess.run(
        [python, "-m", "django", "drain_saga_timeouts", "--until-empty"],
        env=subprocess_env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "fired=1 missed=0 failed=0 dead_lettered=0 unclaimed=0"
    saga = the_saga(TransferFlow, "tr-fresh")
    assert saga.is_complete
    assert saga.state["history"] == ["requested", "expired"]
