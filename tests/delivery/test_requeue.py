"""Requeueing dead letters, timers and outbox rows alike: a requeue sets ``attempts`` to 0
and ``next_attempt_at`` to null, so the row gets its full retry budget again at once; a
step-scoped timer whose wait has ended stays dead-lettered (firing it would wake a step the
saga has left), and so does an outbox row a step published before its saga completed.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.core.management import CommandError, call_command
from django.test import Client, override_settings
from django.urls import reverse
from freezegun.api import FrozenDateTimeFactory

from bsft_saga import clock, publish
from bsft_saga.audit import OUTBOX_REQUEUED, TIMER_REQUEUED
from bsft_saga.engine.termination import terminate
from bsft_saga.events import event_type_of
from bsft_saga.models import (
    SagaAuditRecord,
    SagaInstance,
    SagaOutboxMessage,
    SagaTimeout,
    TimeoutOutcome,
)
from bsft_saga.outbox import deliver_pending
from bsft_saga.outbox import requeue_dead_lettered as requeue_outbox
from bsft_saga.timeouts import drain_due
from bsft_saga.timeouts.maintenance import requeue_dead_lettered
from bsft_saga.timeouts.requests import DEADLINE_TIMER_NAME
from tests.testapp.engine_events import Unrouted
from tests.testapp.ops_flows import make_saga, make_timer
from tests.testapp.timer_events import (
    DebitRequested,
    PaymentDebited,
    PaymentRequested,
    ProbeDue,
    ProbePoked,
    ProbeStarted,
    RefundRequested,
)
from tests.testapp.timer_flows import (
    PAYMENT_BUDGET,
    PaymentFlow,
    ProbeFlow,
    schedule_probe_due,
    the_saga,
    timers_of,
)

pytestmark = pytest.mark.django_db

DEAD = TimeoutOutcome.DEAD_LETTERED


def _moved_on(saga: SagaInstance, step_index: int = 2) -> SagaInstance:
    SagaInstance.objects.filter(pk=saga.pk).update(step_index=step_index)
    return SagaInstance.objects.get(pk=saga.pk)


def _dead(row: SagaTimeout) -> bool:
    return SagaTimeout.objects.get(pk=row.pk).outcome == DEAD


# --- timers ---------------------------------------------------------------------------------


def test_a_requeue_resets_attempts_and_the_next_attempt() -> None:
    row = make_timer(make_saga("reset"), outcome=DEAD)
    SagaTimeout.objects.filter(pk=row.pk).update(next_attempt_at=clock.now())

    assert requeue_dead_lettered([row.pk]).requeued == 1

    requeued = SagaTimeout.objects.get(pk=row.pk)
    assert (requeued.attempts, requeued.next_attempt_at, requeued.outcome) == (0, None, None)


def test_a_requeue_moves_the_sagas_version_on() -> None:
    # A step that read the saga before the requeue must lose its version check and re-read:
    # it decides from that read whether ending its wait has timers to cancel.
    saga = make_saga("version")
    row = make_timer(saga, outcome=DEAD)

    assert requeue_dead_lettered([row.pk]).requeued == 1

    assert SagaInstance.objects.get(pk=saga.pk).version == saga.version + 1


def test_a_step_scoped_timer_whose_wait_has_ended_is_refused() -> None:
    saga = make_saga("moved-on")
    stale = make_timer(saga, "remind", outcome=DEAD)  # scheduled for the wait at step 1
    _moved_on(saga)

    result = requeue_dead_lettered([stale.pk])

    assert result.requeued == 0
    [(pk, reason)] = result.refused
    assert pk == stale.pk
    assert "wait at step 1, which has ended (the saga is at step 2)" in reason
    assert _dead(stale)


def test_a_saga_scoped_timer_is_requeued_after_its_saga_moved_on() -> None:
    saga = make_saga("saga-scope")
    kept = make_timer(saga, "remind", outcome=DEAD)
    SagaTimeout.objects.filter(pk=kept.pk).update(scope="saga")
    _moved_on(saga)

    assert requeue_dead_lettered([kept.pk]).requeued == 1


def test_a_step_scoped_timer_of_a_saga_still_at_its_step_is_requeued() -> None:
    row = make_timer(make_saga("same-step"), outcome=DEAD)
    assert requeue_dead_lettered([row.pk]).requeued == 1


def test_a_refused_stale_timer_cannot_wake_the_later_step(
    clock: FrozenDateTimeFactory, record: Any, action: Any
) -> None:
    # The timer of the first wait dead-lettered, then the saga moved on: requeued, its event
    # would reach the saga at a later step than the one it was scheduled for.
    due = record(ProbeDue)
    due.fail_with = RuntimeError("mail server down")
    publish(ProbeStarted("p-1", action(schedule_probe_due("remind", timedelta(hours=1)))))
    clock.tick(timedelta(hours=1))
    with override_settings(BSFT_SAGA={"DELIVERY": {"MAX_DISPATCH_ATTEMPTS": 1}}):
        assert drain_due().dead_lettered == 1
    publish(ProbePoked("p-1"))  # the wait ends
    [stale] = timers_of(ProbeFlow, "p-1")
    due.fail_with = None

    assert requeue_dead_lettered([stale.pk]).requeued == 0
    assert drain_due().fired == 0
    assert the_saga(ProbeFlow, "p-1").step_index == 2


def test_the_command_requeues_the_others_names_the_stale_timer_and_fails() -> None:
    saga = make_saga("cmd-moved-on")
    stale = make_timer(saga, outcome=DEAD)
    _moved_on(saga)
    fine = make_timer(make_saga("cmd-fine"), outcome=DEAD)
    out, err = StringIO(), StringIO()

    with pytest.raises(CommandError, match=rf"1 timer\(s\) not requeued: {stale.pk}$"):
        call_command(
            "requeue_saga_timeouts", "--id", str(stale.pk), str(fine.pk), stdout=out, stderr=err
        )

    assert "Requeued 1 dead-lettered timer(s)." in out.getvalue()
    assert f"refused {stale.pk}: " in err.getvalue()
    assert "which has ended" in err.getvalue()
    assert _dead(stale)
    assert not _dead(fine)


def test_a_deadline_timer_refused_to_an_operator_keeps_its_place_among_the_refusals() -> None:
    # Requeued past its due time, the deadline timer fires at the next pass and expires its
    # saga; its refusal takes its place among the others, as every refusal does.
    saga = make_saga("dl-moved-on")
    stale = make_timer(saga, outcome=DEAD)
    _moved_on(saga)
    deadline = make_timer(make_saga("dl-requeue"), DEADLINE_TIMER_NAME, outcome=DEAD)
    operator = User.objects.create_user("dl-operator")

    refused = requeue_dead_lettered([stale.pk, deadline.pk], user=operator)

    assert refused.requeued == 0
    assert [pk for pk, _reason in refused.refused] == [stale.pk, deadline.pk]
    assert "needs the permission bsft_saga.terminate_saga" in refused.refused[1][1]
    assert _dead(deadline)
    assert requeue_dead_lettered([deadline.pk]).requeued == 1  # code or a command may


def _staff(*codenames: str) -> Client:
    user = User.objects.create_user(f"staff-{uuid.uuid4().hex[:6]}", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="bsft_saga", codename__in=codenames)
    )
    client = Client()
    client.force_login(user)
    return client


def _messages(response: Any) -> list[tuple[str, str]]:
    return [(m.level_tag, str(m)) for m in get_messages(response.wsgi_request)]


def test_the_admin_action_requeues_the_others_and_warns_about_the_stale_timer() -> None:
    saga = make_saga("admin-moved-on")
    stale = make_timer(saga, outcome=DEAD)
    _moved_on(saga)
    fine = make_timer(make_saga("admin-fine"), outcome=DEAD)
    operator = _staff("view_sagatimeout", "change_sagatimeout")

    response = operator.post(
        reverse("admin:bsft_saga_sagatimeout_changelist"),
        {"action": "requeue_dead_lettered", "_selected_action": [str(stale.pk), str(fine.pk)]},
    )

    messages = _messages(response)
    assert messages[0] == (
        "success",
        "1 dead-lettered timer was requeued; it fires at the next drain.",
    )
    assert messages[1] == ("warning", "1 timer was not requeued:")
    assert "which has ended" in messages[2][1]
    assert _dead(stale)
    assert not _dead(fine)


# --- outbox rows ----------------------------------------------------------------------------


@pytest.fixture
def dead_letter(record: Any) -> SagaOutboxMessage:
    """A deferred event whose receiver failed until the row was dead-lettered."""
    receiver = record(Unrouted)
    receiver.fail_with = ConnectionError("warehouse unreachable")
    publish(Unrouted("hand-off"), defer=True)  # this test's transaction never commits
    with override_settings(BSFT_SAGA={"DELIVERY": {"MAX_DISPATCH_ATTEMPTS": 1}}):
        assert deliver_pending().dead_lettered == 1
    receiver.fail_with = None
    return SagaOutboxMessage.objects.get()


def test_a_requeued_outbox_row_is_delivered_by_the_next_pass(
    dead_letter: SagaOutboxMessage, record: Any
) -> None:
    received = record(Unrouted)

    result = requeue_outbox([dead_letter.pk])

    assert (result.requeued, result.refused) == (1, [])
    row = SagaOutboxMessage.objects.get()
    assert (row.dead_lettered_at, row.attempts, row.next_attempt_at) == (None, 0, None)
    assert "warehouse unreachable" in row.last_error  # why it failed stays visible
    assert deliver_pending().delivered == 1
    assert [e.message_id for e in received.envelopes] == [dead_letter.pk]


def test_requeue_saga_outbox_requeues_every_dead_letter(dead_letter: SagaOutboxMessage) -> None:
    out = StringIO()

    call_command("requeue_saga_outbox", "--all-dead-lettered", stdout=out)

    assert out.getvalue() == "Requeued 1 dead-lettered outbox message(s).\n"
    assert SagaOutboxMessage.objects.get().dead_lettered_at is None


def test_requeue_saga_outbox_names_what_it_refused_and_fails(
    dead_letter: SagaOutboxMessage,
) -> None:
    unknown = uuid.uuid4()
    out, err = StringIO(), StringIO()

    with pytest.raises(CommandError, match=rf"1 outbox message\(s\) not requeued: {unknown}"):
        call_command(
            "requeue_saga_outbox", "--id", str(dead_letter.pk), str(unknown), stdout=out, stderr=err
        )

    assert f"refused {unknown}: outbox message {unknown} does not exist" in err.getvalue()
    assert SagaOutboxMessage.objects.get().dead_lettered_at is None


def test_requeue_saga_outbox_ids_must_be_message_ids() -> None:
    with pytest.raises(CommandError, match="--id: 'abc' is not a UUID"):
        call_command("requeue_saga_outbox", "--id", "abc")


def test_the_outbox_admin_action_requeues_for_holders_of_the_change_permission(
    dead_letter: SagaOutboxMessage,
) -> None:
    url = reverse("admin:bsft_saga_sagaoutboxmessage_changelist")
    data = {"action": "requeue_dead_lettered", "_selected_action": [str(dead_letter.pk)]}
    viewer = _staff("view_sagaoutboxmessage")
    operator = _staff("view_sagaoutboxmessage", "change_sagaoutboxmessage")

    assert viewer.get(url).context["action_form"] is None  # no action to offer a viewer
    viewer.post(url, data)
    assert SagaOutboxMessage.objects.get().dead_lettered_at is not None
    response = operator.post(url, data)

    assert _messages(response) == [
        ("success", "1 dead-lettered outbox message was requeued; the next drain delivers it.")
    ]
    assert SagaOutboxMessage.objects.get().dead_lettered_at is None


def _dead_lettered_outbox(record: Any, event_class: type, act: Any) -> SagaOutboxMessage:
    """The outbox row of ``event_class`` that ``act`` stages, dead-lettered by a failing
    receiver."""
    receiver = record(event_class)
    receiver.fail_with = ConnectionError("mail server down")
    act()
    with override_settings(BSFT_SAGA={"DELIVERY": {"MAX_DISPATCH_ATTEMPTS": 1}}):
        deliver_pending()
    receiver.fail_with = None
    row = SagaOutboxMessage.objects.get(event_type=event_type_of(event_class))
    assert row.dead_lettered_at is not None
    return row


def test_an_outbox_row_published_before_its_saga_completed_is_refused_and_named(
    record: Any,
) -> None:
    # The step asked for a debit; the saga then escalated (an operator terminated it).
    row = _dead_lettered_outbox(record, DebitRequested, lambda: publish(PaymentRequested("p-e")))
    saga = the_saga(PaymentFlow, "p-e")
    terminate([saga.pk], reason="escalated")
    operator = _staff("view_sagaoutboxmessage", "change_sagaoutboxmessage")
    err = StringIO()

    result = requeue_outbox([row.pk])
    with pytest.raises(CommandError, match=rf"1 outbox message\(s\) not requeued: {row.pk}$"):
        call_command("requeue_saga_outbox", "--id", str(row.pk), stdout=StringIO(), stderr=err)
    response = operator.post(
        reverse("admin:bsft_saga_sagaoutboxmessage_changelist"),
        {"action": "requeue_dead_lettered", "_selected_action": [str(row.pk)]},
    )

    reason = (
        f"outbox message 'tests.timers.debit-requested' (id {row.pk}) of saga "
        f"{PaymentFlow.saga_type}[p-e] was published before its saga completed; delivered "
        "now, it would act for a saga that has ended (publish what is still needed yourself)"
    )
    assert (result.requeued, result.refused) == (0, [(row.pk, reason)])
    assert f"refused {row.pk}: {reason}" in err.getvalue()
    assert ("warning", reason) in _messages(response)
    assert SagaOutboxMessage.objects.get(pk=row.pk).dead_lettered_at is not None
    assert not SagaAuditRecord.objects.filter(action=OUTBOX_REQUEUED).exists()


def test_what_the_step_that_completed_the_saga_published_is_requeued(
    clock: FrozenDateTimeFactory, record: Any
) -> None:
    # on_expired refunds the debited payment and completes the saga in one step: the refund
    # is the saga's last word, and must go out however late.
    publish(PaymentRequested("p-r"))
    publish(PaymentDebited("p-r"))
    clock.tick(PAYMENT_BUDGET)

    row = _dead_lettered_outbox(record, RefundRequested, drain_due)

    assert the_saga(PaymentFlow, "p-r").is_complete
    assert requeue_outbox([row.pk]).requeued == 1
    assert deliver_pending().delivered == 1


# --- every requeue is audited, like fire-now and terminate ------------------------------------


def _audited() -> list[tuple[str, str, str, Any]]:
    return [
        (r.action, r.username, r.saga_type, r.instance_id)
        for r in SagaAuditRecord.objects.order_by("id")
    ]


def test_the_timer_admin_action_audits_each_requeued_timer_under_the_operator() -> None:
    saga = make_saga("audit-admin")
    first, second = make_timer(saga, "a", outcome=DEAD), make_timer(saga, "b", outcome=DEAD)
    refused = make_timer(saga, "fired", outcome=TimeoutOutcome.FIRED)
    operator = _staff("view_sagatimeout", "change_sagatimeout")
    username = User.objects.get(is_staff=True).username

    operator.post(
        reverse("admin:bsft_saga_sagatimeout_changelist"),
        {"action": "requeue_dead_lettered", "_selected_action": [first.pk, second.pk, refused.pk]},
    )

    assert _audited() == [(TIMER_REQUEUED, username, saga.saga_type, saga.pk)] * 2


def test_requeue_saga_timeouts_audits_each_requeued_timer_without_a_user() -> None:
    saga = make_saga("audit-command")
    row = make_timer(saga, outcome=DEAD)

    call_command("requeue_saga_timeouts", "--id", str(row.pk), stdout=StringIO())

    assert _audited() == [(TIMER_REQUEUED, "", saga.saga_type, saga.pk)]
    assert SagaAuditRecord.objects.get().user is None


def test_outbox_requeues_are_audited_from_the_admin_and_the_command(
    dead_letter: SagaOutboxMessage,
) -> None:
    operator = _staff("view_sagaoutboxmessage", "change_sagaoutboxmessage")
    username = User.objects.get(is_staff=True).username

    operator.post(
        reverse("admin:bsft_saga_sagaoutboxmessage_changelist"),
        {"action": "requeue_dead_lettered", "_selected_action": [str(dead_letter.pk)]},
    )
    SagaOutboxMessage.objects.filter(pk=dead_letter.pk).update(dead_lettered_at=clock.now())
    call_command("requeue_saga_outbox", "--all-dead-lettered", stdout=StringIO())

    # A deferred event published outside any saga: the records name none.
    assert _audited() == [(OUTBOX_REQUEUED, username, "", None), (OUTBOX_REQUEUED, "", "", None)]


def test_a_refused_requeue_writes_no_audit_record() -> None:
    row = make_timer(make_saga("audit-refused"), outcome=TimeoutOutcome.FIRED)

    assert requeue_dead_lettered([row.pk]).refused

    assert not SagaAuditRecord.objects.exists()


@override_settings(BSFT_SAGA={"API": {"AUDIT_RECORDER": None}})
def test_without_an_audit_recorder_a_requeue_still_requeues() -> None:
    row = make_timer(make_saga("audit-none"), outcome=DEAD)

    assert requeue_dead_lettered([row.pk]).requeued == 1
    assert not SagaAuditRecord.objects.exists()
