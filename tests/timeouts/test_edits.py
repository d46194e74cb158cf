"""Two operator actions: cancel timers, reschedule one; and terminate a saga by flow and key.

A saga's deadline timer is its deadline: rescheduling it moves the deadline, canceling it is
refused. Either action on a timer whose claim's lease ran out takes it from the pass that
claimed it.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError
from freezegun import freeze_time

from bsft_saga import SagaFlow, clock, publish
from bsft_saga.conf import saga_settings
from bsft_saga.delivery.claim import claim
from bsft_saga.events import event_type_of
from bsft_saga.models import (
    JournalKind,
    SagaAuditRecord,
    SagaInstance,
    SagaJournalEntry,
    SagaOutboxMessage,
    SagaTimeout,
    TimeoutOutcome,
)
from bsft_saga.moments import format_moment
from bsft_saga.signals import event_published
from bsft_saga.timeouts import drain_due
from bsft_saga.timeouts.channel import TIMERS
from bsft_saga.timeouts.edits import RescheduleReport, cancel_timers, reschedule_timer
from bsft_saga.timeouts.requests import DEADLINE_TIMER_NAME
from tests.management.test_commands import completed, run, start_reminders
from tests.support.timer_fixtures import T0
from tests.testapp.ops_events import ReminderDue
from tests.testapp.ops_flows import REMINDER_SAGA_TYPE, make_saga, make_timer
from tests.testapp.timer_events import CreditRequested, PaymentDebited, PaymentRequested
from tests.testapp.timer_flows import PaymentFlow, the_saga

pytestmark = pytest.mark.django_db


def _actions() -> list[str]:
    return list(SagaAuditRecord.objects.order_by("pk").values_list("action", flat=True))


def _claim_everything() -> None:
    lease = saga_settings.delivery.claim_lease
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
    saga = make_saga("edits")
    fired = make_timer(saga, "done", outcome=TimeoutOutcome.FIRED, dispatched_at=clock.now())
    claimed = make_timer(saga, "held", due_at=clock.now() - timedelta(seconds=1))
    _claim_everything()
    free = make_timer(saga, "free", due_at=clock.now() + timedelta(days=1))

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
    timer = make_timer(saga, "later", due_at=due)
    new_time = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)

    stdout, _ = run("reschedule_saga_timeout", str(timer.pk), "--to", new_time.isoformat())

    assert f"Timer {timer.pk} is due at 2031-05-06 07:08:09 UTC." in stdout
    timer.refresh_from_db()
    assert timer.due_at == new_time
    assert _actions() == ["saga.timeout.rescheduled"]
    assert drain_due(now=due + timedelta(minutes=1)).settled == 0


def test_reschedule_refuses_a_claimed_timer_and_a_time_it_cannot_store() -> None:
    saga = make_saga("held")
    timer = make_timer(saga, "held", due_at=clock.now() - timedelta(seconds=1))
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


# -- the deadline timer ------------------------------------------------------------------------


def _deadline_of(flow: type[SagaFlow], key: str) -> SagaTimeout:
    return SagaTimeout.objects.get(
        saga__saga_type=flow.saga_type, saga__correlation_key=key, name=DEADLINE_TIMER_NAME
    )


def test_rescheduling_the_deadline_timer_moves_the_saga_s_deadline_and_what_it_publishes() -> None:
    publish(PaymentRequested("p-late"))
    deadline = _deadline_of(PaymentFlow, "p-late")
    before = the_saga(PaymentFlow, "p-late")
    new_time = (clock.now() + timedelta(days=2)).replace(microsecond=0)

    stdout, _ = run("reschedule_saga_timeout", str(deadline.pk), "--to", new_time.isoformat())

    assert f"is due at {format_moment(new_time)}; the saga's deadline moved with it." in stdout
    saga = the_saga(PaymentFlow, "p-late")
    assert (saga.deadline, saga.version) == (new_time, before.version + 1)
    entry = SagaJournalEntry.objects.filter(saga=saga).order_by("id").last()
    assert entry is not None
    assert (entry.kind, entry.timer_name, entry.version) == (
        JournalKind.TIMER_RESCHEDULED,
        DEADLINE_TIMER_NAME,
        saga.version,
    )
    # The step woken next publishes under the deadline as it is now.
    publish(PaymentDebited("p-late"))
    credit = SagaOutboxMessage.objects.get(saga=saga, event_type=event_type_of(CreditRequested))
    assert credit.deadline == new_time


def test_a_deadline_rescheduled_to_now_by_a_command_expires_the_saga_at_the_next_pass() -> None:
    publish(PaymentRequested("p-now"))
    deadline = _deadline_of(PaymentFlow, "p-now")

    run("reschedule_saga_timeout", str(deadline.pk), "--to", clock.now().isoformat())
    drain_due()

    saga = the_saga(PaymentFlow, "p-now")
    assert (saga.is_complete, saga.state["expired"]) == (True, True)


def test_canceling_the_deadline_timer_is_refused_and_points_to_reschedule_and_terminate() -> None:
    publish(PaymentRequested("p-keep"))
    deadline = _deadline_of(PaymentFlow, "p-keep")
    saga = deadline.saga

    with pytest.raises(CommandError, match=f"1 timer\\(s\\) not canceled: {deadline.pk}"):
        run("cancel_saga_timeouts", str(deadline.pk))
    report = cancel_timers([deadline.pk])

    [(pk, reason)] = report.refused
    assert (pk, report.canceled) == (deadline.pk, [])
    assert reason == (
        f"timer 'bsft_saga.deadline' (id {deadline.pk}) of saga {saga.saga_type}[p-keep] is "
        "the saga's deadline: canceled, it would leave a saga that can never expire; "
        "reschedule it to move the deadline, or terminate the saga"
    )
    assert SagaTimeout.objects.get(pk=deadline.pk).is_pending
    assert _actions() == []


def test_rescheduling_the_deadline_needs_the_terminate_permission_from_a_user() -> None:
    publish(PaymentRequested("p-perm"))
    deadline = _deadline_of(PaymentFlow, "p-perm")
    saga = deadline.saga
    new_time = clock.now() + timedelta(days=2)
    operator = User.objects.create_user("operator")
    operator.user_permissions.set(Permission.objects.filter(codename="change_sagatimeout"))

    report = reschedule_timer(deadline.pk, new_time, user=operator)

    assert report.refused == (
        f"timer 'bsft_saga.deadline' (id {deadline.pk}) of saga {saga.saga_type}[p-perm] is "
        "the saga's deadline: rescheduling it moves the deadline (and, once due, runs the "
        "flow's on_expired), which needs the permission bsft_saga.terminate_saga"
    )
    assert SagaTimeout.objects.get(pk=deadline.pk).due_at == deadline.due_at
    assert the_saga(PaymentFlow, "p-perm").deadline == saga.deadline
    assert _actions() == []
    operator.user_permissions.add(Permission.objects.get(codename="terminate_saga"))
    operator = User.objects.get(pk=operator.pk)  # the permission cache is per instance
    assert reschedule_timer(deadline.pk, new_time, user=operator).deadline_moved
    assert the_saga(PaymentFlow, "p-perm").deadline == new_time


# -- a claim whose lease ran out -----------------------------------------------------------------


def test_a_reschedule_after_the_lease_ran_out_takes_the_timer_from_the_hung_pass() -> None:
    with freeze_time(T0) as frozen:
        start_reminders("r-hung")
        timer = SagaTimeout.objects.get(saga__correlation_key="r-hung")
        later = T0 + timedelta(hours=1)
        moved: list[RescheduleReport] = []

        def hang_then_reschedule(sender: type, *, envelope: Any, **kwargs: Any) -> None:
            # The pass has claimed the timer and is running it when it hangs past its
            # lease; meanwhile the operator moves the timer.
            frozen.tick(saga_settings.delivery.claim_lease + timedelta(seconds=1))
            moved.append(reschedule_timer(timer.pk, later))

        event_published.connect(hang_then_reschedule, sender=ReminderDue, weak=False)
        try:
            hung = drain_due()
        finally:
            event_published.disconnect(hang_then_reschedule, sender=ReminderDue)

        [report] = moved
        assert (report.refused, report.due_at) == (None, later)
        # The hung pass could not stamp it: pending at its new time, its step not written.
        assert (hung.fired, hung.unclaimed) == (0, 1)
        row = SagaTimeout.objects.get(pk=timer.pk)
        assert (row.is_pending, row.due_at, row.claim_token) == (True, later, None)
        assert not completed("r-hung")

        frozen.move_to(later)
        assert drain_due().fired == 1

    assert completed("r-hung") == {"r-hung"}
    saga = SagaInstance.objects.get(correlation_key="r-hung")
    kinds = list(saga.journal.order_by("id").values_list("kind", flat=True))
    assert kinds == [JournalKind.STARTED, JournalKind.TIMER_RESCHEDULED, JournalKind.COMPLETED]
