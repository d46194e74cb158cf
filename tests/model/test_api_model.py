"""The public API against a model of what it should do (Hypothesis, stateful).

The machine publishes events (message ids repeated, delayed with ``deliver_at`` or
``delay``), moves the frozen clock, runs drain passes, terminates sagas and takes the
operator actions on timers (cancel, reschedule, fire now, requeue), on the flows of
tests/testapp/model_flows.py, and does each of those to the plain model of
tests/model/model.py too. After every step it checks that the two agree: no event applied
twice, none lost (each is applied, kept, waiting as a delayed message, or counted ignored
with its reason), no pending timer past its due time after a drain, and every saga's
step, state, version, timers, kept events and journal as the model says. The rows written
for later keep the trace that wrote them: every timer its step's, a delayed message its
publisher's when that ran under a span (half of them do, by message id), none otherwise.

``HYPOTHESIS_PROFILE=model-long`` (``make test-model``) runs it much longer.
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from unittest import mock

import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.db.models import Min
from django.test import override_settings
from freezegun import freeze_time
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from opentelemetry import trace

from bsft_saga import PublishOutcome, publish, publish_many, publishing_many, telemetry
from bsft_saga.draining import drain_round
from bsft_saga.engine.termination import terminate
from bsft_saga.flows import activation
from bsft_saga.models import (
    SagaInboxEntry,
    SagaInstance,
    SagaJournalEntry,
    SagaKeptEvent,
    SagaOutboxMessage,
    SagaTimeout,
)
from bsft_saga.publishing_many import GROUP_SIZE
from bsft_saga.telemetry import IGNORED_REASONS, trace_context_of
from bsft_saga.timeouts.edits import cancel_timers, reschedule_timer
from bsft_saga.timeouts.expedite import fire_now
from bsft_saga.timeouts.maintenance import requeue_dead_lettered
from tests.model.model import (
    CHAIN,
    MAX_KEPT,
    RULES,
    TIMED,
    Delayed,
    Model,
    Saga,
    Sent,
    Timer,
    bytes_order,
    mariadb_order,
)
from tests.support import telemetry as telemetry_support
from tests.testapp import model_flows
from tests.testapp.model_events import (
    ChainGate,
    ChainItem,
    ChainOpened,
    TimedDone,
    TimedNote,
    TimedOpened,
)

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
KEYS = ("a", "b")
IGNORED = "bsft.saga.event.ignored"
TRANSITIONS = {"started", "advanced", "handled", "completed", "expired", "terminated"}

#: No "explain" phase: it traces every line the engine runs, which costs minutes.
PHASES = [Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink]

settings.register_profile(
    "model",
    max_examples=int(os.environ.get("MODEL_EXAMPLES", "150")),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    print_blob=True,
    report_multiple_bugs=False,
    phases=PHASES,
)
settings.register_profile(
    "model-long",
    max_examples=int(os.environ.get("MODEL_EXAMPLES", "3000")),
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    print_blob=True,
    report_multiple_bugs=False,
    phases=PHASES,
)

EVENTS = {
    "chain_open": lambda s: ChainOpened(s.key),
    "gate": lambda s: ChainGate(s.key),
    "item": lambda s: ChainItem(s.key, s.n),
    "timed_open": lambda s: TimedOpened(s.key),
    "note": lambda s: TimedNote(s.key, s.n, s.action),
    "done": lambda s: TimedDone(s.key),
}
#: At once, mostly; else a delayed message (``delay`` or ``deliver_at``).
WHEN = st.sampled_from(["now", "now", "now", "delay", "deliver_at"])
STEPS = st.sampled_from(
    [timedelta(minutes=10), timedelta(hours=1), timedelta(hours=3), timedelta(days=1, minutes=1)]
)
#: Message ids every database stores (MariaDB refuses UUID versions 8 and above).
MESSAGE_IDS = st.uuids(version=4)
#: An event of either flow, for a batch.
SENT = st.builds(
    Sent,
    kind=st.sampled_from(["chain_open", "gate", "item", "timed_open", "note", "done"]),
    key=st.sampled_from(KEYS),
    n=st.integers(1, 9),
    action=st.sampled_from(["note", "cancel", "replace"]),
    message_id=MESSAGE_IDS,
)


def _wipe() -> None:
    """Every row of the suite's sagas (and any other), so that each example starts empty."""
    SagaKeptEvent.objects.all().delete()
    SagaOutboxMessage.objects.all().delete()
    SagaTimeout.objects.all().delete()
    SagaJournalEntry.objects.all().delete()
    SagaInboxEntry.objects.all().delete()
    SagaInstance.objects.all().delete()


def _ignored_now() -> Counter[tuple[str, str]]:
    """The counter ``bsft.saga.event.ignored`` of the suite's flows, by reason."""
    otel = telemetry_support.install()
    return Counter(
        {
            (flow, reason): otel.counter_value(IGNORED, **{"saga.type": flow, "reason": reason})
            for flow in (CHAIN, TIMED)
            for reason in IGNORED_REASONS
        }
    )


class _CountedIgnored:
    """What the engine counts ignored, as it counts it (``telemetry.count_ignored``).

    Reading the OpenTelemetry counter after every step would run the gauges' queries each
    time; the machine reads this after every step and the counter itself at the end of
    each example, which must say the same.
    """

    def __init__(self) -> None:
        self.counted: Counter[tuple[str, str]] = Counter()
        self.real = telemetry.count_ignored

    def __call__(self, saga_type: str, reason: str) -> None:
        self.real(saga_type, reason)
        if saga_type in (CHAIN, TIMED):
            self.counted[(saga_type, reason)] += 1


class ApiMachine(RuleBasedStateMachine):
    """Drive the public API and the model side by side."""

    def __init__(self) -> None:
        super().__init__()
        _wipe()
        model_flows.BROKEN.clear()
        self.freezer = freeze_time(T0, tick=False)
        self.clock = self.freezer.start()
        delivery = dict(django_settings.BSFT_SAGA.get("DELIVERY", {}))
        delivery["MAX_DISPATCH_ATTEMPTS"] = 1  # a failure gives a row up at once
        engine = dict(django_settings.BSFT_SAGA.get("ENGINE", {}))
        engine["MAX_KEPT_EVENTS_PER_SAGA"] = MAX_KEPT  # so that the limit is reached
        self.overridden = override_settings(
            BSFT_SAGA={**django_settings.BSFT_SAGA, "DELIVERY": delivery, "ENGINE": engine}
        )
        self.overridden.enable()
        self.narrowed = activation.only([CHAIN, TIMED])
        self.narrowed.__enter__()
        RUNS["examples"] += 1
        mariadb = connection.vendor == "mysql" and getattr(connection, "mysql_is_mariadb", False)
        self.model = Model(T0, mariadb_order if mariadb else bytes_order)
        self.baseline = _ignored_now()
        self.ignored = _CountedIgnored()
        telemetry.count_ignored = self.ignored
        self.drained = True
        # The broken nudges' failures are logged with their tracebacks: not the news here.
        self.quiet = logging.getLogger("bsft_saga")
        self.level = self.quiet.level
        self.quiet.setLevel(logging.CRITICAL)
        self.outboxed: set[uuid.UUID] = set()  # message ids written to the outbox
        self.traced: dict[uuid.UUID, bool] = {}  # each one's publisher ran under a span

    def teardown(self) -> None:
        telemetry.count_ignored = self.ignored.real
        self.quiet.setLevel(self.level)
        self.narrowed.__exit__(None, None, None)
        self.overridden.disable()
        self.freezer.stop()
        model_flows.BROKEN.clear()
        _wipe()
        counter = _ignored_now() - self.baseline
        assert counter == +self.ignored.counted, "bsft.saga.event.ignored says otherwise"

    # -- rules: events ------------------------------------------------------------------------

    @rule(
        kind=st.sampled_from(["chain_open", "gate", "item", "item"]),
        key=st.sampled_from(KEYS),
        n=st.integers(1, 9),
        when=WHEN,
        later=STEPS,
        message_id=MESSAGE_IDS,
    )
    def publish_to_the_chain(
        self, kind: str, key: str, n: int, when: str, later: timedelta, message_id: uuid.UUID
    ) -> None:
        self._publish(Sent(kind, key, n, "note", message_id), when, later)

    @rule(
        kind=st.sampled_from(["timed_open", "note", "note", "done"]),
        key=st.sampled_from(KEYS),
        n=st.integers(1, 9),
        action=st.sampled_from(["note", "cancel", "replace"]),
        when=WHEN,
        later=STEPS,
        message_id=MESSAGE_IDS,
    )
    def publish_to_the_timed_flow(
        self,
        kind: str,
        key: str,
        n: int,
        action: str,
        when: str,
        later: timedelta,
        message_id: uuid.UUID,
    ) -> None:
        self._publish(Sent(kind, key, n, action, message_id), when, later)

    def _publish(self, sent: Sent, when: str, later: timedelta) -> None:
        self.model.sent.append(sent)
        self._send(sent, when, later)

    @precondition(lambda self: bool(self.model.sent))
    @rule(data=st.data(), when=st.sampled_from(["now", "now", "delay"]), later=STEPS)
    def publish_again(self, data: st.DataObject, when: str, later: timedelta) -> None:
        """The same event, with the same message id (a redelivery)."""
        sent = data.draw(st.sampled_from(self.model.sent), label="repeat of")
        self._send(sent, when, later)

    @rule(data=st.data(), size=st.integers(1, 6), group=st.sampled_from([1, 2, 3, GROUP_SIZE]))
    def publish_a_batch(self, data: st.DataObject, size: int, group: int) -> None:
        """Several events in one ``publish_many()``, new ones and repeats of message ids
        (of earlier calls, or of the batch itself): as if published one by one, in order.
        Its groups commit every ``group`` events, as slow steps make them commit early."""
        batch: list[Sent] = []
        for _ in range(size):
            earlier = self.model.sent + batch
            repeat: bool = bool(earlier) and data.draw(st.booleans(), label="a repeat")
            if repeat:
                batch.append(data.draw(st.sampled_from(earlier), label="repeat of"))
            else:
                batch.append(data.draw(SENT, label="event"))
        for sent in batch:
            if sent not in self.model.sent:
                self.model.sent.append(sent)
        with mock.patch.object(publishing_many, "GROUP_SIZE", group):
            published = publish_many(
                [EVENTS[sent.kind](sent) for sent in batch],
                message_ids=[sent.message_id for sent in batch],
            )
        expected = self.model.publish_many(batch)
        outcomes = [
            f"ignored:{p.reason}" if p.outcome is PublishOutcome.IGNORED else p.outcome.value
            for p in published
        ]
        assert outcomes == expected, [p.error for p in published]

    def _send(self, sent: Sent, when: str, later: timedelta) -> None:
        with _publisher_span(sent):
            self._send_now(sent, when, later)

    def _send_now(self, sent: Sent, when: str, later: timedelta) -> None:
        event = EVENTS[sent.kind](sent)
        if when != "now":
            if sent.message_id in self.outboxed:
                if not RULES["outbox_repeat"]:
                    when = "now"  # see RULES["outbox_repeat"]
                else:
                    # In the outbox already: publishing it again writes nothing.
                    publish(event, message_id=sent.message_id, delay=later)
                    return
            self.outboxed.add(sent.message_id)
            self.traced[sent.message_id] = _traced(sent)
        if when == "now":
            publish(event, message_id=sent.message_id)
            self.model.deliver(sent)
        else:
            if when == "delay":
                publish(event, message_id=sent.message_id, delay=later)
            else:
                publish(event, message_id=sent.message_id, deliver_at=self.model.now + later)
            self.model.delayed.append(Delayed(self.model.seq(), sent, self.model.now + later))

    # -- rules: time --------------------------------------------------------------------------

    @rule(by=STEPS)
    def advance_clock(self, by: timedelta) -> None:
        self.model.now += by
        self.clock.move_to(self.model.now)
        self.drained = False

    @rule()
    def drain(self) -> None:
        while drain_round().found_work:
            pass
        self.model.drain()
        self.drained = True

    @rule(key=st.sampled_from(KEYS), broken=st.booleans())
    def break_or_fix_nudges(self, key: str, broken: bool) -> None:
        """The nudge body of ``key`` raises (or no longer does): a cause an operator fixes."""
        (model_flows.BROKEN.add if broken else model_flows.BROKEN.discard)(key)
        (self.model.broken.add if broken else self.model.broken.discard)(key)

    # -- rules: operators ---------------------------------------------------------------------

    @precondition(lambda self: bool(self.model.sagas))
    @rule(data=st.data())
    def terminate_saga(self, data: st.DataObject) -> None:
        saga = data.draw(st.sampled_from(self.model.sagas), label="saga")
        report = terminate([self._id(saga)], reason="the model says so")
        assert bool(report.terminated) == self.model.terminate(saga), report

    @precondition(lambda self: any(s.flow == TIMED for s in self.model.sagas))
    @rule(
        data=st.data(),
        action=st.sampled_from(["cancel", "reschedule", "fire_now", "requeue"]),
        later=STEPS,
    )
    def take_an_operator_action(self, data: st.DataObject, action: str, later: timedelta) -> None:
        sagas = [s for s in self.model.sagas if s.flow == TIMED]
        saga = data.draw(st.sampled_from(sagas), label="saga")
        timer = data.draw(st.sampled_from(saga.timers), label="timer")
        pk = self._timer_id(saga, timer)
        if action == "cancel":
            report = cancel_timers([pk])
            done = bool(report.canceled)
            assert done == self.model.cancel(saga, timer), report
        elif action == "reschedule":
            when = self.model.now + later
            result = reschedule_timer(pk, when)
            assert (result.refused is None) == self.model.reschedule(saga, timer, when), result
        elif action == "fire_now":
            fired = fire_now([pk])
            assert bool(fired.due_now) == self.model.fire_now(saga, timer), fired
            self.drained = False
        else:
            requeued = requeue_dead_lettered([pk])
            assert bool(requeued.requeued) == self.model.requeue(saga, timer), requeued
            self.drained = False

    # -- finding the model's rows in the database ---------------------------------------------

    def _id(self, saga: Saga) -> uuid.UUID:
        """The instance the model's ``saga`` is: the instances of its key in the order
        they started (their first inbox row), as the model's."""
        if saga.db_id is None:
            same = [s for s in self.model.sagas if s.flow == saga.flow and s.key == saga.key]
            ordered = list(
                SagaInstance.objects.filter(saga_type=saga.flow, correlation_key=saga.key)
                .annotate(first_handled=Min("inbox_entries__id"))
                .order_by("first_handled")
                .values_list("pk", flat=True)
            )
            index = same.index(saga)
            assert len(ordered) > index, f"{saga.label}: no instance number {index + 1}"
            saga.db_id = ordered[index]
        return saga.db_id

    def _timer_id(self, saga: Saga, timer: Timer) -> int:
        rows = list(
            SagaTimeout.objects.filter(saga_id=self._id(saga), name=timer.name)
            .order_by("id")
            .values_list("pk", flat=True)
        )
        index = [t for t in saga.timers if t.name == timer.name].index(timer)
        assert len(rows) > index, f"{saga.label}: timer {timer.name} number {index + 1} not stored"
        return rows[index]

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def agrees_with_the_model(self) -> None:
        """Every check, after every step (one line each in a falsifying example)."""
        try:
            self._check()
        except AssertionError:
            RUNS["first_falsified"] = RUNS["first_falsified"] or RUNS["examples"]
            raise

    def _check(self) -> None:
        self.ignored_events_are_counted_with_their_reason()
        self.every_saga_is_where_the_model_says()
        self.no_event_is_applied_twice_and_the_journal_agrees()
        self.kept_events_are_where_the_model_says()
        self.timers_are_where_the_model_says()
        self.nothing_is_due_after_a_drain()
        self.no_event_is_lost()
        self.rows_written_for_later_keep_the_trace_that_wrote_them()

    def ignored_events_are_counted_with_their_reason(self) -> None:
        assert +self.ignored.counted == +self.model.ignored

    def every_saga_is_where_the_model_says(self) -> None:
        stored = SagaInstance.objects.filter(saga_type__in=[CHAIN, TIMED]).count()
        assert stored == len(self.model.sagas), "a saga the model does not know (or one missing)"
        for saga in self.model.sagas:
            row = SagaInstance.objects.get(pk=self._id(saga))
            where = f"{saga.label} #{self.model.sagas.index(saga)}"
            assert (row.step_index, row.is_complete) == (saga.step, saga.complete), where
            assert bool(row.terminated_reason) == saga.terminated, where
            assert row.version == saga.version, f"{where}: version"
            if saga.flow == CHAIN:
                assert row.state == {"items": saga.items}, where
            else:
                assert row.state["notes"] == saga.notes, where
                assert (row.state["nudges"], row.state["done"], row.state["expired"]) == (
                    saga.nudges,
                    saga.done,
                    saga.expired,
                ), where
                if RULES["timer_ignore_deadline"]:
                    assert row.state["watch_without_deadline"] == saga.watch_without_deadline, where
                if RULES["deadline_actions"] and not saga.complete:
                    assert row.deadline == saga.deadline, f"{where}: deadline"

    def no_event_is_applied_twice_and_the_journal_agrees(self) -> None:
        for saga in self.model.sagas:
            entries = list(
                SagaJournalEntry.objects.filter(saga_id=self._id(saga))
                .order_by("id")
                .values_list("kind", "step_before", "step_after", "version", "via", "message_id")
            )
            applied = [e[5] for e in entries if e[0] in TRANSITIONS and e[5] is not None]
            assert len(applied) == len(set(applied)), f"{saga.label}: an event applied twice"
            inbox = set(
                SagaInboxEntry.objects.filter(saga_id=saga.db_id).values_list(
                    "message_id", flat=True
                )
            )
            # A timer's message id is its row's, which the model does not know: the
            # published ones must be the same, and as many of the rest.
            published = {sent.message_id for sent in self.model.sent}
            assert inbox & published == saga.inbox & published, f"{saga.label}: inbox"
            assert len(inbox) == len(saga.inbox), f"{saga.label}: inbox rows"
            got = [
                e[:5]
                if e[0] in TRANSITIONS
                else (e[0], None, None, e[3] if e[0] == "timer_rescheduled" else None, e[4])
                for e in entries
            ]
            assert got == saga.journal, f"{saga.label}: journal"

    def kept_events_are_where_the_model_says(self) -> None:
        for saga in self.model.sagas:
            stored = sorted(
                list(
                    SagaKeptEvent.objects.filter(saga_id=self._id(saga)).values_list(
                        "message_id", "step_index"
                    )
                )
            )
            assert stored == sorted((k.message_id, k.step) for k in saga.kept), (
                f"{saga.label}: kept"
            )
        for key, rows in self.model.pre_kept.items():
            unowned = sorted(
                SagaKeptEvent.objects.filter(
                    saga__isnull=True, saga_type=CHAIN, correlation_key=key
                ).values_list("message_id", flat=True)
            )
            assert unowned == sorted(k.message_id for k in rows), (
                f"{CHAIN}[{key}]: kept before start"
            )

    def timers_are_where_the_model_says(self) -> None:
        for saga in self.model.sagas:
            rows = list(
                SagaTimeout.objects.filter(saga_id=self._id(saga))
                .order_by("id")
                .values_list("name", "outcome", "due_at")
            )
            got = [
                (name, outcome or "pending", due if outcome is None else None)
                for name, outcome, due in rows
            ]
            want = [
                (t.name, t.status, t.due if t.pending else None)
                for t in sorted(saga.timers, key=lambda t: t.seq)
            ]
            assert got == want, f"{saga.label}: timers"

    def nothing_is_due_after_a_drain(self) -> None:
        if not self.drained:
            return
        now = self.model.now
        late = [
            row
            for row in SagaTimeout.objects.pending().values(
                "id", "name", "due_at", "next_attempt_at"
            )
            if (row["next_attempt_at"] or row["due_at"]) <= now
        ]
        assert late == [], "a pending timer past its due time after a drain"
        waiting = SagaOutboxMessage.objects.pending().count()
        assert waiting == len(self.model.delayed), "delayed messages"

    def rows_written_for_later_keep_the_trace_that_wrote_them(self) -> None:
        """Every timer names its step's span (a step always runs under one here); a delayed
        message its publisher's span if it had one, and nothing if not."""
        assert not SagaTimeout.objects.filter(trace_context__isnull=True).exists(), "timers"
        if not self.traced:
            return
        delayed = SagaOutboxMessage.objects.filter(saga__isnull=True, pk__in=self.traced)
        for message_id, stored in delayed.values_list("id", "trace_context"):
            assert (trace_context_of(stored) is not None) == self.traced[message_id], (
                f"the trace of delayed message {message_id}"
            )

    def no_event_is_lost(self) -> None:
        """Each published message id is in an inbox, kept, waiting to be delivered, or was
        counted ignored (the counter's check above says with which reason)."""
        inboxes = set(SagaInboxEntry.objects.values_list("message_id", flat=True))
        kept = set(SagaKeptEvent.objects.values_list("message_id", flat=True))
        waiting = set(SagaOutboxMessage.objects.pending().values_list("id", flat=True))
        accounted = inboxes | kept | waiting
        missing = [s for s in self.model.sent if s.message_id not in accounted]
        if missing:
            assert sum(self.model.ignored.values()) >= len(missing), missing


def _traced(sent: Sent) -> bool:
    """Whether ``sent`` is published under a span (a request's, say): half of them are."""
    return sent.message_id.int % 2 == 0


@contextlib.contextmanager
def _publisher_span(sent: Sent) -> Iterator[None]:
    if not _traced(sent):
        yield
        return
    with trace.get_tracer("tests.model").start_as_current_span("publisher"):
        yield


#: How many examples ran, and which one first disagreed with the model (0: none).
RUNS = {"examples": 0, "first_falsified": 0}


@pytest.mark.slow
@pytest.mark.timeout(0 if os.environ.get("HYPOTHESIS_PROFILE") == "model-long" else 900)
def test_the_public_api_does_what_the_model_says(transactional_db: Any) -> None:
    profile = os.environ.get("HYPOTHESIS_PROFILE", "model")
    RUNS.update(examples=0, first_falsified=0)
    try:
        run_state_machine_as_test(ApiMachine, settings=settings.get_profile(profile))
    finally:
        print(
            f"model ({profile}): {RUNS['examples']} examples run (shrinking included); "
            f"first disagreement at example {RUNS['first_falsified'] or '-'}; rules off: "
            f"{', '.join(name for name, on in RULES.items() if not on) or 'none'}"
        )
