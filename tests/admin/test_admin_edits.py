"""The admin's operator actions on timers: ``cancel_timeouts`` and ``reschedule_timeout``; a
saga's deadline timer is never canceled, and moving it also needs the terminate permission."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from html import unescape
from typing import Any

import pytest
from django.test import Client
from django.utils.html import strip_tags

from bsft_saga import clock, publish
from bsft_saga.models import (
    SagaAuditRecord,
    SagaDispatcher,
    SagaInstance,
    SagaTimeout,
    TimeoutOutcome,
)
from bsft_saga.moments import format_moment
from bsft_saga.timeouts.requests import DEADLINE_TIMER_NAME
from tests.admin.test_admin import _messages, _url, _user
from tests.admin.test_admin_operations import OPERATOR, offered_actions
from tests.admin.test_admin_picture import _groups, _picture, _text
from tests.testapp.ops_events import QuoteSent
from tests.testapp.ops_flows import make_saga, make_timer

pytestmark = pytest.mark.django_db


def _act(client: Client, action: str, *timers: SagaTimeout, **fields: str) -> Any:
    return client.post(
        _url("sagatimeout", "changelist"),
        {"action": action, "_selected_action": [str(t.pk) for t in timers], **fields},
    )


def test_cancel_timeouts_cancels_pending_timers_and_names_a_claimed_one() -> None:
    saga = make_saga("cancel")
    free = make_timer(saga, "free", due_at=clock.now() + timedelta(days=1))
    held = make_timer(saga, "held", due_at=clock.now() - timedelta(minutes=1))
    SagaTimeout.objects.filter(pk=held.pk).update(claimed_until=clock.now() + timedelta(minutes=4))

    response = _act(_user("operator", *OPERATOR), "cancel_timeouts", free, held)

    messages = _messages(response)
    assert ("success", "1 timer was canceled; it will not fire.") in messages
    assert ("warning", "1 timer was not canceled:") in messages
    assert any("held by a dispatcher's claim until" in text for _level, text in messages)
    assert SagaTimeout.objects.get(pk=free.pk).outcome == TimeoutOutcome.CANCELED
    assert SagaTimeout.objects.get(pk=held.pk).is_pending
    records = SagaAuditRecord.objects.filter(action="saga.timeout.canceled")
    assert [(r.username, r.instance_id) for r in records] == [("operator", saga.pk)]


def test_reschedule_timeout_asks_for_the_time_then_moves_the_timer() -> None:
    timer = make_timer(make_saga("move"), "later", due_at=clock.now() + timedelta(days=1))
    operator = _user("operator", *OPERATOR)

    form = _act(operator, "reschedule_timeout", timer)
    moved = _act(operator, "reschedule_timeout", timer, post="yes", due_at="2031-05-06T07:08:09Z")

    assert form.status_code == 200
    assert b'name="due_at"' in form.content
    assert ("success", "Timer 'later' is due at 2031-05-06 07:08:09 UTC.") in _messages(moved)
    assert SagaTimeout.objects.get(pk=timer.pk).due_at == datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
    assert SagaAuditRecord.objects.filter(action="saga.timeout.rescheduled").count() == 1


@pytest.mark.parametrize(
    ("typed", "error"),
    [
        ("next tuesday", "Type a date and time"),
        (
            "9999-12-31T23:59:59-15:00",
            "“9999-12-31T23:59:59-15:00” is out of range: a due time must lie between "
            "0001-01-02 and 9998-12-31 (UTC).",
        ),
    ],
)
def test_reschedule_timeout_shows_a_form_error_for_a_time_it_cannot_store(
    typed: str, error: str
) -> None:
    due = clock.now() + timedelta(days=1)
    timer = make_timer(make_saga("bad"), "later", due_at=due)

    response = _act(
        _user("operator", *OPERATOR), "reschedule_timeout", timer, post="yes", due_at=typed
    )

    assert response.status_code == 200
    [shown] = _form_errors(response)
    assert shown.startswith(error)
    assert "reschedule" not in shown
    assert SagaTimeout.objects.get(pk=timer.pk).due_at == due


def _form_errors(response: Any) -> list[str]:
    page = response.content.decode()
    return [
        unescape(item.split("</li>", 1)[0]) for item in page.split('<ul class="errorlist"><li>')[1:]
    ]


def _form_text(response: Any, id_: str) -> str | None:
    """The text of the reschedule form's paragraph ``id_`` (``None``: the form has none)."""
    page = response.content.decode()
    if f'id="{id_}"' not in page:
        return None
    paragraph = page.split(f'id="{id_}">', 1)[1].split("</p>", 1)[0]
    return " ".join(unescape(strip_tags(paragraph)).split())


def test_the_reschedule_form_names_the_timer_s_saga_linked_and_its_due_time() -> None:
    saga = make_saga("q-4711")
    due = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
    timer = make_timer(saga, "followup", due_at=due)

    form = _act(_user("operator", *OPERATOR), "reschedule_timeout", timer)

    assert _form_text(form, "saga-timer") == (
        f"Timer “followup” of saga {saga.saga_type}[q-4711] is due at 2031-05-06 07:08:09 UTC."
    )
    assert f'<a href="{_url("sagainstance", "change", saga.pk)}">' in form.content.decode()
    assert _form_text(form, "saga-timer-claimed") is None
    assert _form_text(form, "saga-timer-retired") is None


def test_the_reschedule_form_says_a_claim_holds_the_timer_until_when_before_it_is_submitted() -> (
    None
):
    dispatcher = SagaDispatcher.objects.create(
        host="web-1", pid=4242, kind="loop", started_at=clock.now(), last_pass_at=clock.now()
    )
    timer = make_timer(make_saga("held"), "held", due_at=clock.now())
    until = (clock.now() + timedelta(minutes=4)).replace(microsecond=0)
    SagaTimeout.objects.filter(pk=timer.pk).update(claimed_until=until, claimed_by=dispatcher.pk)

    form = _act(_user("operator", *OPERATOR), "reschedule_timeout", timer)

    assert _form_text(form, "saga-timer-claimed") == (
        f"A dispatcher's claim holds it until {format_moment(until)} (loop web-1:4242): it may "
        "be firing right now, so rescheduling it is refused until then."
    )


def test_the_reschedule_form_says_a_retired_timer_cannot_be_moved() -> None:
    timer = make_timer(make_saga("gone"), "gone", outcome="fired")

    form = _act(_user("operator", *OPERATOR), "reschedule_timeout", timer)

    assert _form_text(form, "saga-timer-retired") == (
        "It is no longer pending (fired): rescheduling it is refused."
    )


def test_reschedule_timeout_takes_one_timer_at_a_time() -> None:
    saga = make_saga("two")
    timers = [make_timer(saga, name, due_at=clock.now()) for name in ("a", "b")]

    response = _act(_user("operator", *OPERATOR), "reschedule_timeout", *timers)

    assert ("warning", "Select exactly one timer to reschedule.") in _messages(response)


def test_cancel_and_reschedule_need_the_change_permission() -> None:
    timer = make_timer(make_saga("nope"), due_at=clock.now() + timedelta(days=1))
    viewer = _user("viewer", "view_sagatimeout")

    changelist = viewer.get(_url("sagatimeout", "changelist"))
    _act(viewer, "cancel_timeouts", timer)

    assert not {"cancel_timeouts", "reschedule_timeout"} & offered_actions(changelist)
    assert SagaTimeout.objects.get(pk=timer.pk).is_pending


# -- the deadline timer ------------------------------------------------------------------------


def _deadline_timer(key: str) -> SagaTimeout:
    """The ``with_deadline`` timer of a new ``QuoteFollowUpFlow`` (14 days ahead)."""
    publish(QuoteSent(key))
    return SagaTimeout.objects.get(saga__correlation_key=key, name=DEADLINE_TIMER_NAME)


def test_rescheduling_the_deadline_timer_needs_the_terminate_permission_too() -> None:
    deadline = _deadline_timer("q-dl")
    before = deadline.saga.deadline
    operator = _user("operator", *OPERATOR)

    form = _act(operator, "reschedule_timeout", deadline)
    moved = _act(
        operator, "reschedule_timeout", deadline, post="yes", due_at="2031-05-06T07:08:09Z"
    )

    assert _form_text(form, "saga-timer-deadline") == (
        "It is the saga's deadline: moving it needs the permission bsft_saga.terminate_saga, "
        "so rescheduling it is refused."
    )
    messages = _messages(moved)
    assert ("warning", "The timer was not rescheduled:") in messages
    assert any(
        f"(id {deadline.pk}) of saga quotes.follow-up[q-dl] is the saga's deadline" in text
        and "needs the permission bsft_saga.terminate_saga" in text
        for _level, text in messages
    )
    deadline.refresh_from_db()
    assert deadline.due_at == before
    assert SagaInstance.objects.get(pk=deadline.saga_id).deadline == before
    assert not SagaAuditRecord.objects.filter(action="saga.timeout.rescheduled").exists()


def test_an_operator_who_may_terminate_moves_the_saga_s_deadline_with_its_timer() -> None:
    deadline = _deadline_timer("q-move")
    before = SagaInstance.objects.get(pk=deadline.saga_id).deadline
    new_time = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
    operator = _user("ops", *OPERATOR, "terminate_saga", "view_sagainstance")

    form = _act(operator, "reschedule_timeout", deadline)
    moved = _act(
        operator, "reschedule_timeout", deadline, post="yes", due_at="2031-05-06T07:08:09Z"
    )

    assert _form_text(form, "saga-timer-deadline") == (
        f"It is the saga's deadline (now {format_moment(before)}): rescheduling "
        "it moves the deadline with it, and the flow's on_expired runs when it fires."
    )
    assert (
        "success",
        "Timer 'bsft_saga.deadline' is due at 2031-05-06 07:08:09 UTC; the saga's deadline "
        "moved with it.",
    ) in _messages(moved)
    assert SagaInstance.objects.get(pk=deadline.saga_id).deadline == new_time
    # The instance page's picture dates the deadline where it is now.
    page = operator.get(_url("sagainstance", "change", deadline.saga_id)).content.decode()
    (note,) = _groups(_picture(page), "deadline")
    assert _text(note).splitlines()[-1] == "deadline at 2031-05-06 07:08:09 UTC"


def test_cancel_timeouts_refuses_the_deadline_timer_even_to_who_may_terminate() -> None:
    deadline = _deadline_timer("q-cancel")
    free = make_timer(deadline.saga, "free", due_at=clock.now() + timedelta(days=1))

    response = _act(_user("ops", *OPERATOR, "terminate_saga"), "cancel_timeouts", deadline, free)

    messages = _messages(response)
    assert ("success", "1 timer was canceled; it will not fire.") in messages
    assert ("warning", "1 timer was not canceled:") in messages
    assert any(
        "can never expire; reschedule it to move the deadline, or terminate the saga" in text
        for _level, text in messages
    )
    assert SagaTimeout.objects.get(pk=deadline.pk).is_pending


def test_requeueing_a_dead_lettered_deadline_timer_needs_the_terminate_permission_too() -> None:
    # Requeued past its due time, the deadline timer fires at the next pass and expires
    # the saga: the same power as firing it now.
    deadline = _deadline_timer("q-requeue")
    other = make_timer(
        deadline.saga, "other", outcome=TimeoutOutcome.DEAD_LETTERED, dispatched_at=clock.now()
    )
    SagaTimeout.objects.filter(pk=deadline.pk).update(
        outcome=TimeoutOutcome.DEAD_LETTERED,
        dispatched_at=clock.now(),
        dead_lettered_at=clock.now(),
        attempts=5,
    )

    refused = _act(_user("operator", *OPERATOR), "requeue_dead_lettered", deadline, other)

    messages = _messages(refused)
    assert any(
        f"(id {deadline.pk}) of saga quotes.follow-up[q-requeue]" in text
        and "needs the permission bsft_saga.terminate_saga" in text
        for _level, text in messages
    )
    assert SagaTimeout.objects.get(pk=deadline.pk).dead_lettered_at is not None
    assert ("success", "1 dead-lettered timer was requeued; it fires at the next drain.") in (
        messages
    ), messages
    assert SagaTimeout.objects.get(pk=other.pk).dead_lettered_at is None

    allowed = _act(_user("ops", *OPERATOR, "terminate_saga"), "requeue_dead_lettered", deadline)

    assert not any(level == "warning" for level, _text in _messages(allowed))
    assert SagaTimeout.objects.get(pk=deadline.pk).is_pending
