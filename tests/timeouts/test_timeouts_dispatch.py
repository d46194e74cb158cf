"""One timer pass, ``drain_due()``: what fires, under which correlation id, how failures
are counted and retired (docs/timeouts.md).

Multi-process races and the 10k load test live in tests/processes/test_timeouts_faults.py.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.core.cache import cache
from django.db.models import Max
from django.test import override_settings
from django.utils import timezone
from freezegun.api import FrozenDateTimeFactory

from bsft_saga import UnknownEventType, publish
from bsft_saga.conf import saga_settings
from bsft_saga.correlation import correlation_scope
from bsft_saga.delivery.claim import alone, claim
from bsft_saga.delivery.passes import deliver_claimed
from bsft_saga.delivery.report import DeliveryReport
from bsft_saga.events.sending import send_envelope
from bsft_saga.models import SagaInboxEntry, SagaTimeout, TimeoutOutcome
from bsft_saga.signals import event_published
from bsft_saga.timeouts import DrainReport, drain_due
from bsft_saga.timeouts.channel import TIMERS
from tests.support import telemetry as telemetry_fixtures
from tests.support.timer_fixtures import T0
from tests.testapp.events import (
    NudgeDue,
    QuoteCallbackDue,
    QuoteFollowUpDue,
    QuoteSent,
    TaskOpened,
)
from tests.testapp.timer_events import OfferSent, ProbeDue, ProbePoked, ProbeStarted
from tests.testapp.timer_flows import (
    MAILBOX,
    OfferFlow,
    ProbeFlow,
    QuoteFlow,
    TaskFlow,
    schedule_probe_due,
    send_follow_up_mail,
    the_saga,
    timers_of,
)

pytestmark = pytest.mark.django_db


def clock_now() -> datetime:
    return timezone.now()


def after_back_off(clock: FrozenDateTimeFactory) -> DrainReport:
    """Move the clock to when every timer waiting for a retry is ready again; drain."""
    waiting = SagaTimeout.objects.retrying(clock_now()).aggregate(last=Max("next_attempt_at"))
    assert waiting["last"] is not None, "no timer is waiting for a retry"
    clock.move_to(waiting["last"])
    return drain_due()


def limit_attempts(n: int) -> Any:
    return override_settings(BSFT_SAGA={"DELIVERY": {"MAX_DISPATCH_ATTEMPTS": n}})


def reminder(flow: type, key: str, name: str) -> SagaTimeout:
    return next(row for row in timers_of(flow, key) if row.name == name)


def send_quotes(clock: FrozenDateTimeFactory, *keys: str) -> None:
    """Send one quote per key, an hour apart, so every reminder has its own due time."""
    for key in keys:
        publish(QuoteSent(key))
        clock.tick(timedelta(hours=1))


# --- what fires, and in which order ------------------------------------------------------


def test_a_timer_does_not_fire_before_it_is_due(clock: FrozenDateTimeFactory, record: Any) -> None:
    reminders = record(QuoteFollowUpDue)
    publish(QuoteSent("q-1"))
    clock.tick(timedelta(days=2) - timedelta(seconds=1))

    assert drain_due() == DrainReport()

    assert reminders.envelopes == []
    clock.tick(timedelta(seconds=1))
    assert drain_due().fired == 1


def test_a_pass_fires_due_timers_oldest_first(clock: FrozenDateTimeFactory, record: Any) -> None:
    reminders = record(QuoteFollowUpDue, QuoteCallbackDue)
    send_quotes(clock, "q-1", "q-2")
    clock.move_to(T0 + timedelta(days=5))

    report = drain_due()

    assert report.fired == 4
    assert reminders.events == [
        QuoteFollowUpDue("q-1"),
        QuoteFollowUpDue("q-2"),
        QuoteCallbackDue("q-1"),
        QuoteCallbackDue("q-2"),
    ]


def test_the_batch_size_setting_caps_a_pass_at_the_oldest_timers(
    clock: FrozenDateTimeFactory, record: Any
) -> None:
    reminders = record(QuoteFollowUpDue, QuoteCallbackDue)
    send_quotes(clock, "q-1", "q-2", "q-3")
    clock.move_to(T0 + timedelta(days=5))

    with override_settings(BSFT_SAGA={"DELIVERY": {"BATCH_SIZE": 2}}):
        report = drain_due()

    assert report.fired == 2
    assert reminders.events == [QuoteFollowUpDue("q-1"), QuoteFollowUpDue("q-2")]
    assert SagaTimeout.objects.pending().count() == 4


def test_the_batch_size_argument_overrides_the_setting(
    clock: FrozenDateTimeFactory, record: Any
) -> None:
    record(QuoteFollowUpDue, QuoteCallbackDue)
    send_quotes(clock, "q-1", "q-2", "q-3")
    clock.move_to(T0 + timedelta(days=5))

    with override_settings(BSFT_SAGA={"DELIVERY": {"BATCH_SIZE": 2}}):
        report = drain_due(batch_size=5)

    assert report.fired == 5
    assert SagaTimeout.objects.pending().count() == 1


def test_a_fired_timer_is_stamped_and_leaves_the_pending_set(
    clock: FrozenDateTimeFactory, record: Any
) -> None:
    record(QuoteFollowUpDue)
    publish(QuoteSent("q-1"))
    clock.move_to(T0 + timedelta(days=2, minutes=5))

    drain_due()

    followup = reminder(QuoteFlow, "q-1", "followup")
    assert (followup.outcome, followup.dispatched_at) == (
        TimeoutOutcome.FIRED,
        T0 + timedelta(days=2, minutes=5),
    )
    assert not SagaTimeout.objects.due(T0 + timedelta(days=30)).filter(pk=followup.pk).exists()
    assert drain_due().fired == 0


# --- the envelope a timer publishes --------------------------------------------------------


def test_a_timer_publishes_under_the_correlation_id_it_was_scheduled_with(
    clock: FrozenDateTimeFactory, record: Any
) -> None:
    reminders = record(QuoteFollowUpDue)
    with correlation_scope("request-42"):
        publish(QuoteSent("q-1"))
    clock.move_to(T0 + timedelta(days=2))

    with correlation_scope("the-dispatchers-own"):
        drain_due()

    [envelope] = reminders.envelopes
    assert envelope.correlation_id == "request-42"
    assert reminders.ambient_correlation_ids == ["request-42"]
    assert reminder(QuoteFlow, "q-1", "followup").correlation_id == "request-42"


def test_a_timer_envelope_is_marked_as_coming_from_its_timer(
    clock: FrozenDateTimeFactory, record: Any
) -> None:
    reminders = record(QuoteFollowUpDue)
    publish(QuoteSent("q-1"))
    clock.move_to(T0 + timedelta(days=2))

    drain_due()

    [envelope] = reminders.envelopes
    row = reminder(QuoteFlow, "q-1", "followup")
    assert envelope.message_id == row.message_id
    assert envelope.event_type == "tests.quote.follow-up-due"
    assert envelope.timer is not None
    assert (envelope.timer.timer_id, envelope.timer.saga_id, envelope.timer.name) == (
        row.pk,
        row.saga_id,
        "followup",
    )


# --- exactly once for its own saga, at least once for everyone else ------------------------


def test_a_timer_that_wakes_its_own_saga_is_stamped_fired_in_the_steps_commit(
    clock: FrozenDateTimeFactory,
) -> None:
    publish(TaskOpened("t-1", nudge_after_seconds=3600))
    clock.tick(timedelta(hours=1))

    report = drain_due()

    assert report.fired == 1
    saga = the_saga(TaskFlow, "t-1")
    nudge = reminder(TaskFlow, "t-1", "nudge")
    assert (saga.step_index, saga.version, saga.state["nudged"]) == (2, 2, 1)
    assert (nudge.outcome, nudge.dispatched_at) == (TimeoutOutcome.FIRED, saga.updated_at)
    assert SagaInboxEntry.objects.filter(saga=saga, message_id=nudge.message_id).exists()


def test_a_timer_no_step_awaits_still_fires_to_plain_receivers(
    clock: FrozenDateTimeFactory, record: Any
) -> None:
    reminders = record(QuoteFollowUpDue)
    publish(QuoteSent("q-1"))
    clock.move_to(T0 + timedelta(days=2))

    report = drain_due()

    assert report.fired == 1
    assert reminders.events == [QuoteFollowUpDue("q-1")]
    assert reminder(QuoteFlow, "q-1", "followup").outcome == TimeoutOutcome.FIRED
    assert the_saga(QuoteFlow, "q-1").step_index == 1  # the quote saga does not await it


def test_a_timer_that_fired_without_receivers_is_still_fired(clock: FrozenDateTimeFactory) -> None:
    publish(QuoteSent("q-1"))
    clock.move_to(T0 + timedelta(days=2))

    assert drain_due().fired == 1
    assert reminder(QuoteFlow, "q-1", "followup").outcome == TimeoutOutcome.FIRED


def test_a_redelivered_timer_event_does_not_wake_its_saga_twice(
    clock: FrozenDateTimeFactory, record: Any
) -> None:
    nudges = record(NudgeDue)
    publish(TaskOpened("t-1", nudge_after_seconds=3600))
    clock.tick(timedelta(hours=1))
    drain_due()
    [fired] = nudges.envelopes

    send_envelope(fired)  # e.g. a second dispatcher that published before the first stamped

    saga = the_saga(TaskFlow, "t-1")
    assert (saga.step_index, saga.state["nudged"]) == (2, 1)


def test_a_step_woken_by_a_timer_can_schedule_the_same_name_again(
    clock: FrozenDateTimeFactory, action: Any
) -> None:
    def every_hour(ctx: Any, e: Any) -> None:
        ctx.schedule_timeout("tick", timedelta(hours=1), ProbePoked(e.probe_id, e.action))

    hourly = action(every_hour)
    publish(ProbeStarted("p-1", hourly))
    for _ in range(3):
        clock.tick(timedelta(hours=1))
        assert drain_due().fired == 1

    rows = timers_of(ProbeFlow, "p-1")
    assert [row.outcome for row in rows] == [TimeoutOutcome.FIRED] * 3 + [None]
    assert rows[-1].due_at == T0 + timedelta(hours=4)
    assert the_saga(ProbeFlow, "p-1").step_index == 4


def test_a_chain_of_reminders_keeps_the_correlation_id_of_the_request_that_started_it(
    clock: FrozenDateTimeFactory,
) -> None:
    with correlation_scope("request-7"):
        publish(OfferSent("o-1"))
    clock.move_to(T0 + timedelta(days=2))

    drain_due()  # the follow-up wakes the offer saga, which schedules the last call

    last_call = next(row for row in timers_of(OfferFlow, "o-1") if row.name == "last-call")
    assert last_call.correlation_id == "request-7"


@pytest.fixture
def follow_up_mailer() -> Iterator[list[str]]:
    cache.clear()
    MAILBOX.clear()
    event_published.connect(send_follow_up_mail, sender=QuoteFollowUpDue)
    yield MAILBOX
    event_published.disconnect(send_follow_up_mail, sender=QuoteFollowUpDue)
    MAILBOX.clear()


def test_a_receiver_keyed_on_the_message_id_acts_once_on_a_redelivered_timer_event(
    clock: FrozenDateTimeFactory, record: Any, follow_up_mailer: list[str]
) -> None:
    reminders = record(QuoteFollowUpDue)
    publish(QuoteSent("q-1"))
    clock.move_to(T0 + timedelta(days=2))
    drain_due()
    [fired] = reminders.envelopes

    send_envelope(fired)  # delivered again, as at-least-once allows

    assert follow_up_mailer == ["q-1"]


def _claim_then_lose(clock: FrozenDateTimeFactory, *, hang: timedelta) -> list[Any]:
    """Claim the due rows for a pass that hangs, then let another pass claim them as if
    ``hang`` had passed; return the hung pass's rows."""
    config = saga_settings.delivery
    rows = claim(TIMERS, limit=10, token=HUNG, now=clock_now(), lease=config.claim_lease).rows
    claim(
        TIMERS,
        limit=10,
        token=SUCCESSOR,
        now=clock_now() + config.claim_lease + hang,
        lease=config.claim_lease,
    )
    return rows


# Each claim below takes one row: it holds it with the token it writes for a single row.
HUNG, SUCCESSOR = alone(uuid.uuid4()), alone(uuid.uuid4())


def _nothing_written() -> None:
    saga = the_saga(TaskFlow, "t-1")
    assert (saga.step_index, saga.version, saga.state["nudged"]) == (1, 1, 0)
    nudge = reminder(TaskFlow, "t-1", "nudge")
    assert (nudge.is_pending, nudge.claim_token) == (True, SUCCESSOR)


def test_a_pass_that_stalled_past_its_lease_publishes_nothing_it_lost(
    clock: FrozenDateTimeFactory, record: Any
) -> None:
    nudges = record(NudgeDue)
    publish(TaskOpened("t-1", nudge_after_seconds=3600))
    clock.tick(timedelta(hours=1))
    rows = _claim_then_lose(clock, hang=timedelta(seconds=1))
    clock.tick(saga_settings.delivery.claim_lease + timedelta(seconds=1))

    report = deliver_claimed(TIMERS, rows, HUNG)

    assert report == DeliveryReport(unclaimed=1)
    assert nudges.envelopes == []
    _nothing_written()


def test_a_pass_taken_over_while_its_clock_said_it_held_the_claim_writes_nothing(
    clock: FrozenDateTimeFactory, record: Any
) -> None:
    nudges = record(NudgeDue)
    publish(TaskOpened("t-1", nudge_after_seconds=3600))
    clock.tick(timedelta(hours=1))
    rows = _claim_then_lose(clock, hang=timedelta(seconds=1))

    report = deliver_claimed(TIMERS, rows, HUNG)

    # Its receivers ran (at least once), but the step's writes and the stamp were fenced off.
    assert report == DeliveryReport(unclaimed=1)
    assert len(nudges.envelopes) == 1
    _nothing_written()


def test_a_timer_canceled_before_the_pass_is_not_published(
    clock: FrozenDateTimeFactory, record: Any, action: Any
) -> None:
    due = record(ProbeDue)
    publish(
        ProbeStarted("p-1", action(schedule_probe_due("remind", timedelta(hours=1), scope="saga")))
    )
    clock.tick(timedelta(hours=2))  # due, not yet drained
    publish(ProbePoked("p-1", action(lambda ctx, e: ctx.cancel_timeout("remind"))))

    report = drain_due()

    assert report == DrainReport()
    assert due.envelopes == []


def test_a_timer_canceled_after_the_pass_claimed_it_is_not_published(
    clock: FrozenDateTimeFactory, record: Any, action: Any
) -> None:
    # Both timers are claimed by one pass. The first wakes the saga's next step, which
    # ends the wait and so cancels the second before the pass reaches it: a timer canceled
    # between the claim and its dispatch is never published.
    def two_timers(ctx: Any, e: Any) -> None:
        ctx.schedule_timeout("wake", timedelta(hours=1), ProbePoked(e.probe_id))
        ctx.schedule_timeout("remind", timedelta(hours=2), ProbeDue(e.probe_id))

    due = record(ProbeDue)
    publish(ProbeStarted("p-1", action(two_timers)))
    clock.tick(timedelta(hours=3))

    report = drain_due()

    assert (report.fired, report.unclaimed) == (1, 1)
    assert reminder(ProbeFlow, "p-1", "remind").outcome == TimeoutOutcome.CANCELED
    assert due.envelopes == []


# --- failures ------------------------------------------------------------------------------


class MailServerDown(Exception):
    pass


def test_a_receiver_that_raises_leaves_the_timer_pending_and_counts_an_attempt(
    clock: FrozenDateTimeFactory, record: Any
) -> None:
    mailer = record(QuoteFollowUpDue)
    mailer.fail_with = MailServerDown("smtp timeout")
    publish(QuoteSent("q-1"))
    clock.move_to(T0 + timedelta(days=2))

    report = drain_due()

    assert (report.fired, report.failed) == (0, 1)
    row = reminder(QuoteFlow, "q-1", "followup")
    assert row.is_pending
    assert row.outcome is None
    assert row.attempts == 1
    assert row.last_error == "MailServerDown: smtp timeout"


def test_a_failed_timer_fires_on_a_later_pass_once_its_receiver_recovers(
    clock: FrozenDateTimeFactory, record: Any
) -> None:
    mailer = record(QuoteFollowUpDue)
    mailer.fail_with = MailServerDown("smtp timeout")
    publish(QuoteSent("q-1"))
    clock.move_to(T0 + timedelta(days=2))
    drain_due()

    mailer.fail_with = None
    clock.tick(timedelta(seconds=5))
    report = drain_due()

    assert report.fired == 1
    assert len(mailer.envelopes) == 2  # at least once: the failed delivery was seen too
    row = reminder(QuoteFlow, "q-1", "followup")
    assert (row.outcome, row.attempts) == (TimeoutOutcome.FIRED, 1)


def test_a_timer_that_keeps_failing_is_dead_lettered_at_max_dispatch_attempts(
    clock: FrozenDateTimeFactory, record: Any
) -> None:
    mailer = record(QuoteFollowUpDue)
    mailer.fail_with = MailServerDown("smtp timeout")
    publish(QuoteSent("q-1"))
    clock.move_to(T0 + timedelta(days=2))

    with limit_attempts(3):
        reports = [drain_due(), after_back_off(clock), after_back_off(clock)]
    retired_at = clock_now()

    assert [(r.failed, r.dead_lettered) for r in reports] == [(1, 0), (1, 0), (0, 1)]
    row = reminder(QuoteFlow, "q-1", "followup")
    assert row.outcome == TimeoutOutcome.DEAD_LETTERED
    assert (row.dead_lettered_at, row.dispatched_at) == (retired_at, retired_at)
    assert row.next_attempt_at is None
    assert row.dead_letter_reason == "MailServerDown: smtp timeout"
    assert row.attempts == 3
    assert not SagaTimeout.objects.pending().filter(pk=row.pk).exists()
    assert list(SagaTimeout.objects.dead_lettered()) == [row]
    with limit_attempts(3):
        assert drain_due() == DrainReport()


def test_a_dead_lettered_timers_name_is_free_for_the_saga_to_schedule_anew(
    clock: FrozenDateTimeFactory, record: Any, action: Any
) -> None:
    reminders = record(ProbeDue)
    reminders.fail_with = MailServerDown("down")
    remind = action(schedule_probe_due("remind", timedelta(hours=1), scope="saga"))
    publish(ProbeStarted("p-1", remind))
    clock.tick(timedelta(hours=1))
    with limit_attempts(1):
        assert drain_due().dead_lettered == 1

    publish(ProbePoked("p-1", remind))

    assert [(row.name, row.outcome) for row in timers_of(ProbeFlow, "p-1")] == [
        ("remind", TimeoutOutcome.DEAD_LETTERED),
        ("remind", None),
    ]


def test_a_receiver_failing_after_the_timer_woke_its_own_saga_counts_as_a_failed_attempt(
    clock: FrozenDateTimeFactory, record: Any
) -> None:
    audit = record(NudgeDue)  # connected after the engine: runs once the saga has committed
    audit.fail_with = MailServerDown("audit log down")
    publish(TaskOpened("t-1", nudge_after_seconds=3600))
    clock.tick(timedelta(hours=1))

    report = drain_due()

    assert (report.failed, report.unclaimed) == (1, 0)
    nudge = reminder(TaskFlow, "t-1", "nudge")
    assert (nudge.attempts, nudge.last_error) == (1, "MailServerDown: audit log down")


def test_a_receiver_failing_after_the_timer_woke_its_saga_rolls_the_step_back_with_it(
    clock: FrozenDateTimeFactory, record: Any, action: Any
) -> None:
    def every_hour(ctx: Any, e: Any) -> None:
        ctx.schedule_timeout("tick", timedelta(hours=1), ProbePoked(e.probe_id, e.action))

    audit = record(ProbePoked)  # connected after the engine: runs once the step has run
    audit.fail_with = MailServerDown("audit log down")
    audit.fail_if = lambda envelope: len(audit.envelopes) == 1
    publish(ProbeStarted("p-1", action(every_hour)))
    clock.tick(timedelta(hours=1))

    first = drain_due()
    # The step ran, then the audit receiver failed: the timer's savepoint undid both.
    assert (first.failed, first.fired) == (1, 0)
    assert the_saga(ProbeFlow, "p-1").step_index == 1
    [tick] = timers_of(ProbeFlow, "p-1")
    assert (tick.is_pending, tick.attempts) == (True, 1)
    second = after_back_off(clock)

    # Retried: the saga took the timer once, the receiver got the same message again.
    assert second.fired == 1
    assert [e.message_id for e in audit.envelopes] == [audit.envelopes[0].message_id] * 2
    fired, pending = timers_of(ProbeFlow, "p-1")
    assert (fired.outcome, fired.attempts, fired.claimed_until) == (TimeoutOutcome.FIRED, 1, None)
    assert fired.last_error == "MailServerDown: audit log down"
    assert (pending.name, pending.outcome) == ("tick", None)
    saga = the_saga(ProbeFlow, "p-1")
    assert (saga.step_index, len(saga.state["actions"])) == (2, 2)  # start, then one tick


def test_a_stored_event_type_that_no_longer_resolves_fails_naming_the_type(
    clock: FrozenDateTimeFactory,
) -> None:
    publish(QuoteSent("q-1"))
    SagaTimeout.objects.filter(name="followup").update(event_type="tests.renamed-away")
    clock.move_to(T0 + timedelta(days=2))

    report = drain_due()

    assert report.failed == 1
    row = reminder(QuoteFlow, "q-1", "followup")
    assert row.is_pending
    assert row.last_error.startswith(UnknownEventType.__name__)
    assert "'tests.renamed-away'" in row.last_error


def test_an_unresolvable_timer_is_dead_lettered_with_a_reason_naming_the_type(
    clock: FrozenDateTimeFactory,
) -> None:
    publish(QuoteSent("q-1"))
    SagaTimeout.objects.filter(name="followup").update(event_type="tests.renamed-away")
    clock.move_to(T0 + timedelta(days=2))

    with limit_attempts(2):
        drain_due()
        report = after_back_off(clock)

    assert report.dead_lettered == 1
    row = reminder(QuoteFlow, "q-1", "followup")
    assert row.outcome == TimeoutOutcome.DEAD_LETTERED
    assert "'tests.renamed-away'" in row.dead_letter_reason


def test_a_payload_that_no_longer_decodes_is_a_failure_of_that_timer(
    clock: FrozenDateTimeFactory,
) -> None:
    publish(QuoteSent("q-1"))
    SagaTimeout.objects.filter(name="followup").update(payload={"quote_id": 17})
    clock.move_to(T0 + timedelta(days=5))

    report = drain_due()

    assert (report.failed, report.fired) == (1, 1)  # the callback still fires
    row = reminder(QuoteFlow, "q-1", "followup")
    assert row.is_pending
    assert row.attempts == 1
    assert "quote_id" in row.last_error


def test_a_payload_that_no_longer_decodes_fails_naming_the_stored_type(
    clock: FrozenDateTimeFactory,
) -> None:
    publish(QuoteSent("q-1"))
    SagaTimeout.objects.filter(name="followup").update(payload={"quote_id": 17})
    clock.move_to(T0 + timedelta(days=2))

    drain_due()

    assert "tests.quote.follow-up-due" in reminder(QuoteFlow, "q-1", "followup").last_error


def test_a_broken_row_does_not_stop_the_pass(clock: FrozenDateTimeFactory, record: Any) -> None:
    reminders = record(QuoteFollowUpDue, QuoteCallbackDue)
    send_quotes(clock, "q-1", "q-2")
    SagaTimeout.objects.filter(saga__correlation_key="q-1", name="followup").update(
        event_type="tests.renamed-away"
    )
    clock.move_to(T0 + timedelta(days=5))

    report = drain_due()

    assert (report.failed, report.fired) == (1, 3)
    assert reminders.events == [
        QuoteFollowUpDue("q-2"),
        QuoteCallbackDue("q-1"),
        QuoteCallbackDue("q-2"),
    ]


def test_poison_rows_at_the_head_of_the_queue_step_aside_for_their_back_off(
    clock: FrozenDateTimeFactory, record: Any
) -> None:
    reminders = record(QuoteFollowUpDue, QuoteCallbackDue)
    send_quotes(clock, "q-1", "q-2")
    # The two oldest rows can never fire; with BATCH_SIZE 2 a pass reads only them.
    SagaTimeout.objects.filter(name="followup").update(event_type="tests.renamed-away")
    clock.move_to(T0 + timedelta(days=5))

    with override_settings(BSFT_SAGA={"DELIVERY": {"BATCH_SIZE": 2, "MAX_DISPATCH_ATTEMPTS": 3}}):
        reports = [drain_due(), drain_due(), after_back_off(clock), after_back_off(clock)]

    assert [(r.failed, r.dead_lettered, r.fired) for r in reports] == [
        (2, 0, 0),
        (0, 0, 2),  # while the poison waits out its back-off, the rows behind it fire
        (2, 0, 0),
        (0, 2, 0),
    ]
    assert reminders.events == [QuoteCallbackDue("q-1"), QuoteCallbackDue("q-2")]


def test_a_cancel_error_from_a_woken_receiver_is_a_failure_not_a_stop_of_the_pass(
    clock: FrozenDateTimeFactory, record: Any
) -> None:
    reminders = record(QuoteFollowUpDue, QuoteCallbackDue)
    reminders.fail_with = asyncio.CancelledError()
    reminders.fail_if = lambda envelope: isinstance(envelope.event, QuoteFollowUpDue)
    publish(QuoteSent("q-1"))
    clock.move_to(T0 + timedelta(days=5))

    report = drain_due()

    assert (report.failed, report.fired) == (1, 1)
    followup = reminder(QuoteFlow, "q-1", "followup")
    assert (followup.is_pending, followup.attempts) == (True, 1)
    assert followup.last_error.startswith("CancelledError")
    assert reminder(QuoteFlow, "q-1", "callback").outcome == TimeoutOutcome.FIRED


def test_a_keyboard_interrupt_from_a_receiver_stops_the_pass(
    clock: FrozenDateTimeFactory, record: Any
) -> None:
    reminders = record(QuoteFollowUpDue, QuoteCallbackDue)
    reminders.fail_with = KeyboardInterrupt()
    publish(QuoteSent("q-1"))
    clock.move_to(T0 + timedelta(days=5))

    with pytest.raises(KeyboardInterrupt):
        drain_due()

    assert len(reminders.envelopes) == 1
    assert all(row.is_pending for row in timers_of(QuoteFlow, "q-1"))
    assert all(row.attempts == 0 for row in timers_of(QuoteFlow, "q-1"))
    # The shutdown gave its claims back: the next dispatcher need not wait for the lease.
    assert all(row.claim_token is None for row in timers_of(QuoteFlow, "q-1"))


# --- the report ------------------------------------------------------------------------------


def test_the_drain_report_reads_as_the_command_summary_line() -> None:
    report = DrainReport(fired=3, missed=2, failed=1, dead_lettered=4, unclaimed=5)

    assert str(report) == "fired=3 missed=2 failed=1 dead_lettered=4 unclaimed=5"


def test_the_fired_counter_counts_a_timer_that_woke_its_own_saga_once(
    clock: FrozenDateTimeFactory,
) -> None:
    otel = telemetry_fixtures.install()
    attributes = {"saga.type": TaskFlow.saga_type}
    before = otel.counter_value("bsft.saga.timeout.fired", **attributes)
    publish(TaskOpened("t-1", nudge_after_seconds=3600))
    clock.tick(timedelta(hours=1))

    drain_due()

    assert otel.counter_value("bsft.saga.timeout.fired", **attributes) == before + 1


def test_the_dead_lettered_counter_counts_a_retired_timer(
    clock: FrozenDateTimeFactory,
) -> None:
    otel = telemetry_fixtures.install()
    attributes = {"saga.type": QuoteFlow.saga_type}
    before = otel.counter_value("bsft.saga.timeout.dead_lettered", **attributes)
    publish(QuoteSent("q-1"))
    SagaTimeout.objects.filter(name="followup").update(event_type="tests.renamed-away")
    clock.move_to(T0 + timedelta(days=2))

    with limit_attempts(1):
        drain_due()

    assert otel.counter_value("bsft.saga.timeout.dead_lettered", **attributes) == before + 1
