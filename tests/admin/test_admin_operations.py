"""The operator's admin: status at a glance, the *stuck* filter, ``terminate_sagas`` and
``fire_now``."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from freezegun import freeze_time

from bsft_saga import clock, publish
from bsft_saga.audit import FIRED_NOW, TERMINATED
from bsft_saga.models import SagaAuditRecord, SagaInstance, SagaTimeout, TimeoutOutcome
from bsft_saga.timeouts.expedite import fire_now
from bsft_saga.timeouts.requests import DEADLINE_TIMER_NAME
from tests.admin.test_admin import _messages, _url, _user
from tests.testapp.ops_events import QuoteSent
from tests.testapp.ops_flows import make_saga, make_timer

pytestmark = pytest.mark.django_db

APP_INDEX = "/admin/bsft_saga/"


def offered_actions(changelist: Any) -> set[str]:
    form = changelist.context["action_form"]  # None when no action is offered at all
    return set() if form is None else set(dict(form.fields["action"].choices))


# -- the app index --------------------------------------------------------------------------


def test_the_app_index_shows_lag_due_timers_and_dead_letters_at_a_glance() -> None:
    saga = make_saga("glance")
    now = clock.now()
    make_timer(saga, "late", due_at=now - timedelta(minutes=2))
    make_timer(saga, "dead", outcome=TimeoutOutcome.DEAD_LETTERED)
    client = _user("viewer", "view_sagainstance", "view_sagatimeout")
    client.get(APP_INDEX)  # import the URLconf (and psycopg) before freezegun patches datetime

    with freeze_time(now):
        page = client.get(APP_INDEX)

    assert page.status_code == 200
    text = page.content.decode()
    assert "Timers at a glance" in text
    # Above STALE_AFTER (a minute here): in the warning colour.
    assert 'Lag</th><td class="saga-warning">2 min 0 s</td>' in text, text
    assert re.search(r'\?status=due">Due timers</a></th><td>1</td>', text), text
    assert re.search(r'\?status=dead_lettered">Dead-lettered timers</a></th><td>1</td>', text)


def test_each_count_at_a_glance_links_to_a_list_of_as_many_rows() -> None:
    saga = make_saga("glance")
    now = clock.now()
    late = make_timer(saga, "late", due_at=now - timedelta(minutes=2))
    claimed = make_timer(saga, "claimed", due_at=now - timedelta(minutes=3))
    retrying = make_timer(saga, "retrying", due_at=now - timedelta(minutes=4))
    make_timer(saga, "later", due_at=now + timedelta(hours=1))
    make_timer(saga, "dead", outcome=TimeoutOutcome.DEAD_LETTERED)
    # Due, but held back: a dispatcher's claim, a retry's back-off. Late all the same.
    SagaTimeout.objects.filter(pk=claimed.pk).update(claimed_until=now + timedelta(minutes=5))
    SagaTimeout.objects.filter(pk=retrying.pk).update(
        attempts=1, next_attempt_at=now + timedelta(minutes=5)
    )
    client = _user("viewer", "view_sagainstance", "view_sagatimeout", "view_sagaoutboxmessage")

    page = client.get(APP_INDEX).content.decode()

    rows = re.findall(r'<a href="([^"]+\?[^"]+)">([^<]+)</a></th><td>(\d+)</td>', page)
    assert {label for _url, label, _count in rows} >= {"Due timers", "Dead-lettered timers"}
    for url, label, count in rows:
        listed = client.get(url).context["cl"].result_count
        assert (label, listed) == (label, int(count))
    due = client.get(dict((label, url) for url, label, _ in rows)["Due timers"])
    assert {timer.pk for timer in due.context["cl"].result_list} == {
        late.pk,
        claimed.pk,
        retrying.pk,
    }


def test_the_summary_is_only_for_users_who_may_view_sagas() -> None:
    client = _user("timers-only", "view_sagatimeout")

    page = client.get(APP_INDEX)

    assert page.status_code == 200
    assert "Timers at a glance" not in page.content.decode()


# -- the stuck filter -----------------------------------------------------------------------


def test_the_stuck_filter_lists_active_instances_without_a_pending_timer_that_did_not_move() -> (
    None
):
    old = clock.now() - timedelta(days=2)
    stuck = make_saga("stuck", now=old)
    waiting = make_saga("waiting-for-a-timer", now=old)
    make_timer(waiting, due_at=clock.now() + timedelta(days=1))
    retired = make_saga("only-retired-timers", now=old)
    make_timer(retired, outcome=TimeoutOutcome.FIRED)
    make_saga("done", complete=True, now=old)
    make_saga("recent")

    page = _user("viewer", "view_sagainstance").get(
        _url("sagainstance", "changelist"), {"stuck": "1d"}
    )

    assert page.status_code == 200
    listed = {row.correlation_key for row in page.context["cl"].result_list}
    assert listed == {stuck.correlation_key, retired.correlation_key}


def test_the_stuck_filter_sits_next_to_the_stalled_filter() -> None:
    page = _user("viewer", "view_sagainstance").get(_url("sagainstance", "changelist"))

    titles = [str(spec.title) for spec in page.context["cl"].filter_specs]
    assert titles.index("stuck") == titles.index("stalled") + 1


# -- terminate_sagas ------------------------------------------------------------------------

TERMINATOR = ("view_sagainstance", "terminate_saga")


def _terminate(client: Client, *instances: SagaInstance, **extra: str) -> Any:
    return client.post(
        _url("sagainstance", "changelist"),
        {
            "action": "terminate_sagas",
            "_selected_action": [str(instance.pk) for instance in instances],
            **extra,
        },
    )


def test_the_action_first_asks_for_a_reason_on_a_confirmation_page() -> None:
    saga = make_saga("confirm")

    page = _terminate(_user("ops", *TERMINATOR), saga)

    assert page.status_code == 200
    assert "admin/bsft_saga/sagainstance/terminate_selected_confirmation.html" in [
        template.name for template in page.templates
    ]
    text = page.content.decode()
    assert 'name="post" value="yes"' in text
    assert 'name="reason"' in text
    assert str(saga) in text
    assert not SagaInstance.objects.get(pk=saga.pk).is_complete


def test_confirming_with_a_reason_terminates_and_audits_under_the_user() -> None:
    saga = make_saga("go")
    make_timer(saga, due_at=clock.now() + timedelta(hours=1))
    client = _user("ops", *TERMINATOR)

    response = _terminate(client, saga, post="yes", reason="duplicate order")

    assert response.status_code == 302
    saga.refresh_from_db()
    assert (saga.is_complete, saga.terminated_reason) == (True, "duplicate order")
    assert not SagaTimeout.objects.filter(saga=saga).pending().exists()
    record = SagaAuditRecord.objects.get(action=TERMINATED)
    assert (record.username, record.instance_id) == ("ops", saga.pk)
    assert ("success", "1 saga was terminated; its pending timers were canceled.") in _messages(
        response
    )


def test_confirming_without_a_reason_asks_again_and_changes_nothing() -> None:
    saga = make_saga("no-reason")

    page = _terminate(_user("ops", *TERMINATOR), saga, post="yes", reason="  ")

    assert page.status_code == 200
    assert "Say why" in page.content.decode()
    assert not SagaInstance.objects.get(pk=saga.pk).is_complete


def test_completed_instances_are_refused_with_a_warning_the_others_terminated() -> None:
    done = make_saga("done", complete=True)
    active = make_saga("active")

    response = _terminate(_user("ops", *TERMINATOR), done, active, post="yes", reason="cleanup")

    assert SagaInstance.objects.get(pk=active.pk).is_complete
    assert SagaInstance.objects.get(pk=done.pk).terminated_reason == ""
    messages = _messages(response)
    assert ("warning", "1 saga was not terminated:") in messages
    assert any(level == "warning" and "already complete" in text for level, text in messages)


def test_the_action_needs_the_terminate_permission() -> None:
    saga = make_saga("not-allowed")
    viewer = _user("viewer", "view_sagainstance")

    changelist = viewer.get(_url("sagainstance", "changelist"))
    response = _terminate(viewer, saga, post="yes", reason="because")

    assert "terminate_sagas" not in offered_actions(changelist)
    assert response.status_code in (200, 302)
    assert not SagaInstance.objects.get(pk=saga.pk).is_complete


@pytest.mark.parametrize("reason", ["fraud\x00check", "\x00"])
def test_a_reason_that_cannot_be_stored_is_a_form_error_and_changes_nothing(reason: str) -> None:
    # PostgreSQL refuses a NUL in text (a 500), SQLite would store it.
    saga = make_saga("nul-reason")

    page = _terminate(_user("ops", *TERMINATOR), saga, post="yes", reason=reason)

    assert page.status_code == 200
    assert "The reason cannot be stored" in page.content.decode()
    assert not SagaInstance.objects.get(pk=saga.pk).is_complete
    assert not SagaAuditRecord.objects.exists()


def test_the_change_page_shows_why_an_instance_was_terminated() -> None:
    saga = make_saga("why")
    _terminate(_user("ops", *TERMINATOR), saga, post="yes", reason="fraud check failed")

    page = _user("viewer", "view_sagainstance").get(_url("sagainstance", "change", saga.pk))

    assert "fraud check failed" in page.content.decode()


# -- fire_now -------------------------------------------------------------------------------

OPERATOR = ("view_sagatimeout", "change_sagatimeout")


def _fire_now(client: Client, *timers: SagaTimeout) -> Any:
    return client.post(
        _url("sagatimeout", "changelist"),
        {"action": "fire_now", "_selected_action": [str(timer.pk) for timer in timers]},
    )


def test_fire_now_makes_pending_timers_due_now_and_audits_each() -> None:
    saga = make_saga("fire")
    later = make_timer(saga, "later", due_at=clock.now() + timedelta(days=3))
    backing_off = make_timer(saga, "backing-off", due_at=clock.now() - timedelta(minutes=1))
    SagaTimeout.objects.filter(pk=backing_off.pk).update(
        attempts=2, next_attempt_at=clock.now() + timedelta(hours=1)
    )
    moment = clock.now().replace(microsecond=0)

    with freeze_time(moment):
        response = _fire_now(_user("operator", *OPERATOR), later, backing_off)

    for timer in (later, backing_off):
        timer.refresh_from_db()
        assert (timer.due_at, timer.next_attempt_at, timer.dispatched_at) == (moment, None, None)
    assert backing_off.attempts == 2
    records = SagaAuditRecord.objects.filter(action=FIRED_NOW)
    assert [(r.username, r.instance_id) for r in records] == [("operator", saga.pk)] * 2
    assert ("success", "2 timers are due now; they fire at the next drain.") in _messages(response)


def test_fire_now_refuses_timers_that_are_no_longer_pending() -> None:
    fired = make_timer(make_saga("fired"), outcome=TimeoutOutcome.FIRED)

    response = _fire_now(_user("operator", *OPERATOR), fired)

    messages = _messages(response)
    assert ("warning", "1 timer was not moved:") in messages
    assert any("is not pending (fired)" in text for _level, text in messages)
    assert not SagaAuditRecord.objects.exists()


def test_a_timer_fired_now_fires_at_the_next_drain() -> None:
    from bsft_saga.timeouts import drain_due
    from tests.testapp.ops_events import ReminderRequested

    publish(ReminderRequested("fire-now", delay_seconds=3600))
    [timer] = SagaTimeout.objects.filter(saga__correlation_key="fire-now")
    assert drain_due().fired == 0

    _fire_now(_user("operator", *OPERATOR), timer)

    assert drain_due().fired == 1
    assert SagaInstance.objects.get(correlation_key="fire-now").is_complete


def test_fire_now_needs_the_change_permission() -> None:
    timer = make_timer(make_saga("nope"), due_at=clock.now() + timedelta(days=1))
    viewer = _user("viewer", "view_sagatimeout")

    changelist = viewer.get(_url("sagatimeout", "changelist"))
    _fire_now(viewer, timer)

    assert "fire_now" not in offered_actions(changelist)
    assert SagaTimeout.objects.get(pk=timer.pk).due_at == timer.due_at


def _warned(messages: list[tuple[str, str]], *parts: str) -> bool:
    """Whether one warning holds every one of ``parts``."""
    return any(level == "warning" and all(p in text for p in parts) for level, text in messages)


def test_fire_now_reports_a_claimed_timer_as_held_until_its_lease_ends() -> None:
    # A dispatcher killed mid-batch leaves its claim: the timer fires when the lease runs out,
    # not "at the next drain".
    saga = make_saga("claimed")
    moment = clock.now().replace(microsecond=0)
    lease_end = moment + timedelta(minutes=4)
    claimed = make_timer(saga, "claimed", due_at=moment - timedelta(minutes=1))
    free = make_timer(saga, "free", due_at=moment + timedelta(days=1))
    SagaTimeout.objects.filter(pk=claimed.pk).update(claimed_until=lease_end)

    with freeze_time(moment):
        response = _fire_now(_user("operator", *OPERATOR), claimed, free)

    messages = _messages(response)
    assert ("success", "1 timer is due now; it fires at the next drain.") in messages
    assert ("warning", "1 timer was made due but is held by a dispatcher's claim:") in messages
    assert _warned(
        messages,
        f"timer 'claimed' (id {claimed.pk}) is held by another dispatcher's claim until "
        f"{lease_end:%Y-%m-%d %H:%M:%S} UTC; it fires when that dispatcher delivers it or "
        "once the lease ends",
    ), messages
    assert SagaAuditRecord.objects.filter(action=FIRED_NOW).count() == 2


def test_the_fire_now_service_counts_held_timers_apart() -> None:
    saga = make_saga("claimed")
    now = clock.now()
    claimed = make_timer(saga, "claimed", due_at=now + timedelta(days=1))
    SagaTimeout.objects.filter(pk=claimed.pk).update(claimed_until=now + timedelta(minutes=4))
    expired_claim = make_timer(saga, "expired-claim", due_at=now + timedelta(days=1))
    SagaTimeout.objects.filter(pk=expired_claim.pk).update(claimed_until=now - timedelta(seconds=1))

    result = fire_now([claimed.pk, expired_claim.pk], now=now)

    assert result.due_now == 1
    assert [pk for pk, _message in result.held] == [claimed.pk]
    assert result.refused == []


def _deadline_timer(key: str) -> SagaTimeout:
    """The ``with_deadline`` timer of a new ``QuoteFollowUpFlow`` (14 days ahead)."""
    publish(QuoteSent(key))
    return SagaTimeout.objects.get(saga__correlation_key=key, name=DEADLINE_TIMER_NAME)


def test_firing_a_deadline_timer_now_needs_the_terminate_permission() -> None:
    # Its event runs the flow's on_expired, which here completes the saga.
    deadline = _deadline_timer("q-deadline")
    other = make_timer(deadline.saga, "followup-2", due_at=clock.now() + timedelta(days=1))

    response = _fire_now(_user("operator", *OPERATOR), deadline, other)

    deadline.refresh_from_db()
    assert deadline.due_at > clock.now() + timedelta(days=13)
    messages = _messages(response)
    assert ("success", "1 timer is due now; it fires at the next drain.") in messages
    assert _warned(messages, "is the deadline of", "needs the permission bsft_saga.terminate_saga")
    assert SagaAuditRecord.objects.filter(action=FIRED_NOW).count() == 1


def test_an_operator_who_may_terminate_may_fire_a_deadline_timer_now() -> None:
    deadline = _deadline_timer("q-deadline")
    moment = clock.now().replace(microsecond=0)

    with freeze_time(moment):
        response = _fire_now(_user("ops", *OPERATOR, "terminate_saga"), deadline)

    deadline.refresh_from_db()
    assert deadline.due_at == moment
    assert ("success", "1 timer is due now; it fires at the next drain.") in _messages(response)
