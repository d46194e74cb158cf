"""An operator's levers: cancel timers, reschedule one, terminate a saga by flow and key."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import CommandError

from bsft_saga import clock
from bsft_saga.conf import saga_settings
from bsft_saga.delivery.claim import claim
from bsft_saga.models import SagaAuditRecord, SagaInstance, SagaTimeout, TimeoutOutcome
from bsft_saga.timeouts import drain_due
from bsft_saga.timeouts.channel import TIMERS
from bsft_saga.timeouts.levers import cancel_timers, reschedule_timer
from tests.operations.test_commands import run, start_reminders
from tests.testapp.ops_flows import REMINDER_SAGA_TYPE, make_saga, make_timeout

pytestmark = pytest.mark.django_db


def _actions() -> list[str]:
    return list(SagaAuditRecord.objects.order_by("pk").values_list("action", flat=True))


def _claim_everything() -> None:
    lease = saga_settings.timeouts.claim_lease
    claim(TIMERS, limit=100, token=uuid.uuid4(), now=clock.now(), lease=lease)


def test_canceling_a_pending_timer_retires_it_unpublished_and_audits_it() -> None:
    start_reminders("r-1")
    timer = SagaTimeout.objects.get(saga__correlation_key="r-1")

    stdout, _ = run("cancel_saga_timeouts", str(timer.pk))

    assert "Canceled 1 timer(s)." in stdout
    timer.refresh_from_db()
    assert (timer.outcome, timer.is_pending) == (TimeoutOutcome.CANCELED, False)
    assert _actions() == ["saga.timeout.canceled"]
    assert drain_due().fired == 0  # nothing left to fire


def test_cancel_refuses_claimed_retired_and_unknown_timers_and_names_each() -> None:
    saga = make_saga("levers")
    fired = make_timeout(saga, "done", outcome=TimeoutOutcome.FIRED, dispatched_at=clock.now())
    claimed = make_timeout(saga, "held", due_at=clock.now() - timedelta(seconds=1))
    _claim_everything()
    free = make_timeout(saga, "free", due_at=clock.now() + timedelta(days=1))

    report = cancel_timers([claimed.pk, fired.pk, 999_999, free.pk])

    assert report.canceled == [free.pk]
    reasons = dict(report.refused)
    assert "held by a dispatcher's claim until" in reasons[claimed.pk]
    assert "is not pending (fired)" in reasons[fired.pk]
    assert reasons[999_999] == "timer 999999 does not exist"
    claimed.refresh_from_db()
    assert claimed.is_pending
    with pytest.raises(CommandError, match=f"1 timer\\(s\\) not canceled: {claimed.pk}"):
        run("cancel_saga_timeouts", str(claimed.pk))


def test_a_rescheduled_timer_fires_at_its_new_time_not_its_old_one() -> None:
    saga = make_saga("moved")
    due = clock.now() + timedelta(hours=1)
    timer = make_timeout(saga, "later", due_at=due)
    new_time = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)

    stdout, _ = run("reschedule_saga_timeout", str(timer.pk), "--to", new_time.isoformat())

    assert f"Timer {timer.pk} is due at 2031-05-06 07:08:09 UTC." in stdout
    timer.refresh_from_db()
    assert timer.due_at == new_time
    assert _actions() == ["saga.timeout.rescheduled"]
    assert drain_due(now=due + timedelta(minutes=1)).settled == 0


def test_reschedule_refuses_a_claimed_timer_and_a_time_it_cannot_store() -> None:
    saga = make_saga("held")
    timer = make_timeout(saga, "held", due_at=clock.now() - timedelta(seconds=1))
    _claim_everything()

    report = reschedule_timer(timer.pk, clock.now() + timedelta(days=1))

    assert report.due_at is None
    assert report.refused is not None
    assert "held by a dispatcher's claim" in report.refused
    with pytest.raises(CommandError, match="refused"):
        run("reschedule_saga_timeout", str(timer.pk), "--to", "2031-01-01T00:00:00+00:00")
    with pytest.raises(CommandError, match="--to"):
        run("reschedule_saga_timeout", str(timer.pk), "--to", "9999-12-31T23:59:59-15:00")
    with pytest.raises(ValueError, match="due_at"):
        reschedule_timer(timer.pk, datetime(2030, 1, 1))  # naive
    assert _actions() == []


def test_terminate_saga_by_flow_and_key() -> None:
    start_reminders("r-key")

    stdout, _ = run(
        "terminate_saga", "--flow", REMINDER_SAGA_TYPE, "--key", "r-key", "--reason", "stuck"
    )

    assert "Terminated 1 saga instance(s)." in stdout
    saga = SagaInstance.objects.get(saga_type=REMINDER_SAGA_TYPE, correlation_key="r-key")
    assert (saga.is_complete, saga.terminated_reason) == (True, "stuck")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--flow", REMINDER_SAGA_TYPE], "--flow and --key go together"),
        (["--key", "k"], "--flow and --key go together"),
        ([str(uuid.uuid4()), "--flow", REMINDER_SAGA_TYPE, "--key", "k"], "not both"),
        ([], "name the instances to terminate"),
        (["--flow", REMINDER_SAGA_TYPE, "--key", "nobody"], "no active instance"),
    ],
)
def test_terminate_saga_refuses_a_flow_without_a_key_and_other_mixups(
    args: list[str], message: str
) -> None:
    with pytest.raises(CommandError, match=message):
        run("terminate_saga", *args, "--reason", "stuck")


def test_terminate_saga_by_a_mistyped_flow_lists_the_installed_ones() -> None:
    start_reminders("r-key")

    with pytest.raises(CommandError) as error:
        run("terminate_saga", "--flow", "tests.ops.remindr", "--key", "r-key", "--reason", "x")

    message = str(error.value)
    assert message.startswith("unknown saga type 'tests.ops.remindr'; installed saga types: ")
    assert REMINDER_SAGA_TYPE in message.split("installed saga types: ")[1].split(", ")
    saga = SagaInstance.objects.get(saga_type=REMINDER_SAGA_TYPE, correlation_key="r-key")
    assert not saga.is_complete


def test_terminate_saga_by_flow_and_key_reaches_a_flow_no_longer_installed() -> None:
    saga = make_saga("k", saga_type="tests.ops.retired-flow")

    run("terminate_saga", "--flow", "tests.ops.retired-flow", "--key", "k", "--reason", "gone")

    saga.refresh_from_db()
    assert (saga.is_complete, saga.terminated_reason) == (True, "gone")
    with pytest.raises(CommandError) as error:
        run("terminate_saga", "--flow", "tests.ops.retired-flow", "--key", "k", "--reason", "x")
    assert str(error.value) == "no active instance of 'tests.ops.retired-flow' has the key 'k'"
