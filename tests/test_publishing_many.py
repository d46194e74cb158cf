"""``publish_many``: many events applied as ``publish()`` applies each, written in groups."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from freezegun import freeze_time

import bsft_saga
from bsft_saga import Published, PublishOutcome, apublish_many, publish, publish_many
from bsft_saga.delivery.commit import COMMIT_INTERVAL
from bsft_saga.models import (
    SagaInboxEntry,
    SagaInstance,
    SagaJournalEntry,
    SagaOutboxMessage,
    SagaTimeout,
)
from bsft_saga.publishing_many import GROUP_SIZE
from bsft_saga.signals import event_published
from tests.support import telemetry as telemetry_fixtures
from tests.support.examples import docs_examples
from tests.testapp.engine_events import ProbeNext, ProbeStarted, ReminderRequested
from tests.testapp.events import (
    FailingStarted,
    OrderCanceled,
    OrderPlaced,
    OrderShipped,
    StockReserved,
)
from tests.testapp.flows import ContextProbeFlow, ReminderFlow, StepFailed
from tests.testapp.model_events import ChainGate, ChainItem, ChainOpened
from tests.testapp.timer_events import ProbeStarted as TimerProbeStarted
from tests.testapp.timer_flows import ProbeFlow

pytestmark = pytest.mark.django_db(transaction=True)

Register = Callable[[Callable[[Any, Any], None]], str]

#: What differs between two runs of the same events: ids, and the saga a row belongs to.
#: What two writes of one event cannot share: ids, and the trace context of each step's own
#: span once a test of the session installed a tracer provider (its own test checks it).
_DIFFERS = {"id", "saga_id", "message_id", "claim_token", "trace_context"}


def _rows(saga_type: str) -> dict[str, Any]:
    """Every row the sagas of ``saga_type`` wrote, by key, without what must differ."""

    def values(queryset: Any) -> list[dict[str, Any]]:
        rows = [
            {name: value for name, value in row.items() if name not in _DIFFERS}
            for row in queryset.values()
        ]
        return sorted(rows, key=repr)

    found: dict[str, Any] = {}
    for saga in SagaInstance.objects.filter(saga_type=saga_type):
        found[saga.correlation_key] = {
            "saga": values(SagaInstance.objects.filter(pk=saga.pk)),
            "inbox": values(SagaInboxEntry.objects.filter(saga=saga)),
            "journal": values(SagaJournalEntry.objects.filter(saga=saga)),
            "timers": values(SagaTimeout.objects.filter(saga=saga)),
            "outbox": values(SagaOutboxMessage.objects.filter(saga=saga)),
        }
    return found


def _forget_everything() -> None:
    SagaOutboxMessage.objects.all().delete()
    SagaInstance.objects.all().delete()


def _outcomes(published: list[Published]) -> list[tuple[PublishOutcome, str]]:
    return [(p.outcome, p.reason) for p in published]


STARTED = (PublishOutcome.STARTED, "")
APPLIED = (PublishOutcome.APPLIED, "")


# -- what it writes ----------------------------------------------------------------------


@freeze_time("2026-03-02 09:00:00")
def test_each_event_writes_the_rows_publish_writes_for_it() -> None:
    # A start that schedules a timer, a start that publishes (an outbox row), and a step of
    # an existing saga, with the message and correlation ids publish() is given.
    events = [
        *(ReminderRequested(f"r-{n}") for n in range(3)),
        OrderPlaced("o-1"),
        OrderPlaced("o-2"),
        StockReserved("o-1"),
    ]
    ids = [uuid.uuid4() for _ in events]
    for event, message_id in zip(events, ids, strict=True):
        publish(event, message_id=message_id, correlation_id="import-1")
    one_by_one = (_rows(ReminderFlow.saga_type), _rows("tests.order"))
    _forget_everything()

    publish_many(events, message_ids=ids, correlation_id="import-1")

    assert (_rows(ReminderFlow.saga_type), _rows("tests.order")) == one_by_one
    assert SagaTimeout.objects.count() == 3
    assert SagaJournalEntry.objects.filter(via="publish").count() == len(events)


def test_each_event_is_sent_to_the_signal_as_publish_sends_it() -> None:
    sent: list[Any] = []

    def receiver(sender: type, *, envelope: Any, **kwargs: Any) -> None:
        sent.append(envelope)

    event_published.connect(receiver, dispatch_uid="test-publish-many")
    try:
        published = publish_many([ReminderRequested("r-signal"), OrderShipped("nobody")])
    finally:
        event_published.disconnect(dispatch_uid="test-publish-many")

    assert sent == [p.envelope for p in published]


def test_the_timers_and_outbox_rows_carry_the_steps_trace_context(action: Register) -> None:
    otel = telemetry_fixtures.install()
    otel.span_exporter.clear()

    publish_many([ReminderRequested("r-traced"), OrderPlaced("o-traced")])

    steps = {
        span.attributes["saga.type"]: span
        for span in otel.spans("saga.step")
        if span.attributes is not None
    }
    timer = SagaTimeout.objects.get(saga__correlation_key="r-traced")
    outbox = SagaOutboxMessage.objects.get(saga__correlation_key="o-traced")
    for row, saga_type in ((timer, ReminderFlow.saga_type), (outbox, "tests.order")):
        span = steps[saga_type]
        assert span.context is not None
        assert row.trace_context is not None
        assert f"{span.context.span_id:016x}" in row.trace_context["traceparent"]


def test_each_step_runs_with_no_transaction_open() -> None:
    publish_many([ProbeStarted("p-1"), ProbeStarted("p-2"), ProbeNext("p-1")])

    states = SagaInstance.objects.filter(saga_type=ContextProbeFlow.saga_type)
    assert [s.state["in_atomic_block"] for s in states] == [False, False]
    assert sorted(s.state["steps"] for s in states) == [1, 2]


def test_a_group_of_slow_steps_commits_once_they_have_run_for_a_commit_interval() -> None:
    # Each event's receivers take longer than a commit interval: each event's saga is
    # committed before the next event's steps run, not after the hundredth.
    committed_before: list[int] = []

    def slow(sender: type, *, envelope: Any, **kwargs: Any) -> None:
        committed_before.append(SagaInstance.objects.count())  # no transaction is open
        time.sleep(COMMIT_INTERVAL * 1.2)

    event_published.connect(slow, dispatch_uid="test-publish-many-slow")
    try:
        published = publish_many([ReminderRequested(f"r-slow-{n}") for n in range(3)])
    finally:
        event_published.disconnect(dispatch_uid="test-publish-many-slow")

    assert _outcomes(published) == [STARTED] * 3
    assert committed_before == [0, 1, 2]


# -- what it returns ---------------------------------------------------------------------


def test_it_returns_what_became_of_each_event_in_input_order() -> None:
    publish(OrderPlaced("o-known"))

    published = publish_many(
        [
            OrderPlaced("o-new"),
            StockReserved("o-known"),
            OrderPlaced("o-known"),  # its saga runs, past its start
            StockReserved("o-nobody"),
            FailingStarted("f-1", fail=True),
        ]
    )

    assert _outcomes(published) == [
        STARTED,
        APPLIED,
        (PublishOutcome.IGNORED, "not_awaited"),
        (PublishOutcome.IGNORED, "no_instance"),
        (PublishOutcome.FAILED, ""),
    ]
    new = SagaInstance.objects.get(correlation_key="o-new")
    known = SagaInstance.objects.get(correlation_key="o-known")
    assert [p.saga_ids for p in published[:2]] == [(new.pk,), (known.pk,)]
    assert [type(p.error) for p in published] == [type(None)] * 4 + [StepFailed]
    assert published[0].envelope.event == OrderPlaced("o-new")
    assert isinstance(published[0], bsft_saga.Published)


def test_an_event_no_flow_awaits_is_ignored_as_no_flow(action: Register) -> None:
    from tests.testapp.engine_events import ProbeEcho

    [published] = publish_many([ProbeEcho("nobody", "forward")])

    assert (published.outcome, published.reason) == (PublishOutcome.IGNORED, "no_flow")


def test_an_event_that_wakes_two_flows_writes_both_windows() -> None:
    publish(OrderPlaced("o-both"))
    publish(StockReserved("o-both"))

    [published] = publish_many([OrderShipped("o-both")])

    order = SagaInstance.objects.get(saga_type="tests.order", correlation_key="o-both")
    shipped = SagaInstance.objects.exclude(saga_type="tests.order").get(correlation_key="o-both")
    assert published.outcome is PublishOutcome.STARTED  # the second flow's saga
    assert set(published.saga_ids) == {order.pk, shipped.pk}
    assert (order.is_complete, order.state["shipped"]) == (True, True)


# -- failures ----------------------------------------------------------------------------


def test_a_failing_step_writes_nothing_and_the_others_commit() -> None:
    events = [
        ReminderRequested("r-before"),
        FailingStarted("f-fails", fail=True),
        ReminderRequested("r-after"),
        FailingStarted("f-works", fail=False),
    ]

    published = publish_many(events)

    assert _outcomes(published) == [STARTED, (PublishOutcome.FAILED, ""), STARTED, STARTED]
    assert isinstance(published[1].error, StepFailed)
    assert str(published[1].error) == "step failed for f-fails"
    keys = set(SagaInstance.objects.values_list("correlation_key", flat=True))
    assert keys == {"r-before", "r-after", "f-works"}
    # The failing step's timer and outbox row went with it.
    assert not SagaTimeout.objects.filter(saga__correlation_key="f-fails").exists()
    assert SagaOutboxMessage.objects.filter(saga__isnull=True).count() == 0
    assert SagaInboxEntry.objects.filter(message_id=published[1].envelope.message_id).count() == 0


def test_a_window_that_lost_a_race_is_applied_again_before_the_events_after_it(
    action: Register,
) -> None:
    # The third event's step starts the second event's key behind the call's back, after
    # the second was planned as a start and before its group commits: the group's INSERT
    # fails, it is written one by one, and the second event is applied again.
    def start_it_elsewhere(ctx: Any, e: Any) -> None:
        publish(TimerProbeStarted("p-raced"))

    published = publish_many(
        [
            TimerProbeStarted("p-first"),
            TimerProbeStarted("p-raced"),
            TimerProbeStarted("p-third", action=action(start_it_elsewhere)),
            TimerProbeStarted("p-last"),
        ]
    )

    assert _outcomes(published) == [
        STARTED,
        (PublishOutcome.IGNORED, "not_awaited"),  # p-raced runs, at step 1 (no start)
        STARTED,
        STARTED,
    ]
    sagas = SagaInstance.objects.filter(saga_type=ProbeFlow.saga_type)
    assert sorted(s.correlation_key for s in sagas) == ["p-first", "p-last", "p-raced", "p-third"]


# -- at most once per message id ---------------------------------------------------------


def test_a_message_id_twice_in_one_call_is_applied_once() -> None:
    message_id = uuid.uuid4()

    published = publish_many(
        [ReminderRequested("r-twice"), ReminderRequested("r-twice")],
        message_ids=[message_id, message_id],
    )

    assert _outcomes(published) == [STARTED, (PublishOutcome.IGNORED, "duplicate")]
    assert SagaInboxEntry.objects.filter(message_id=message_id).count() == 1
    assert SagaTimeout.objects.count() == 1


def test_a_message_id_a_saga_handled_before_is_ignored() -> None:
    started, advanced = uuid.uuid4(), uuid.uuid4()
    publish(OrderPlaced("o-again"), message_id=started)
    publish(StockReserved("o-again"), message_id=advanced)

    published = publish_many(
        [OrderPlaced("o-again"), StockReserved("o-again"), StockReserved("o-again")],
        message_ids=[started, advanced, None],
    )

    assert _outcomes(published) == [
        (PublishOutcome.IGNORED, "duplicate"),
        (PublishOutcome.IGNORED, "duplicate"),
        (PublishOutcome.IGNORED, "not_awaited"),  # a new message: the saga is past that step
    ]
    saga = SagaInstance.objects.get(correlation_key="o-again")
    assert (saga.step_index, saga.version) == (2, 2)
    assert SagaInboxEntry.objects.filter(saga=saga).count() == 2


def test_an_import_run_twice_applies_nothing_twice() -> None:
    events = [ReminderRequested(f"r-{n}") for n in range(5)]
    ids = [uuid.uuid5(uuid.NAMESPACE_URL, f"import/{n}") for n in range(5)]
    publish_many(events, message_ids=ids)

    again = publish_many(events, message_ids=ids)

    assert {(p.outcome, p.reason) for p in again} == {(PublishOutcome.IGNORED, "duplicate")}
    assert SagaTimeout.objects.count() == 5


# -- order ---------------------------------------------------------------------------------


def test_two_events_of_one_key_behave_as_two_publish_calls_in_that_order() -> None:
    published = publish_many([OrderPlaced("o-1"), OrderPlaced("o-1"), OrderCanceled("o-1")])

    assert _outcomes(published) == [
        STARTED,
        (PublishOutcome.IGNORED, "not_awaited"),  # the saga of o-1 runs: no second start
        APPLIED,  # the first one's saga takes it
    ]
    saga = SagaInstance.objects.get(correlation_key="o-1")
    assert (saga.is_complete, saga.state["canceled"]) == (True, True)
    kinds = SagaJournalEntry.objects.filter(saga=saga).order_by("version")
    assert [entry.kind for entry in kinds] == ["started", "completed"]


def test_a_kept_event_applied_after_a_commit_is_not_taken_for_a_repeat_of_its_message() -> None:
    # The item is kept before its saga starts; the gate's commit (made to plan the repeat)
    # applies it, and the repeat, planned afterwards, finds it handled.
    message_id = uuid.uuid4()

    published = publish_many(
        [ChainItem("k", 1), ChainOpened("k"), ChainGate("k"), ChainItem("k", 1)],
        message_ids=[message_id, None, None, message_id],
    )

    assert _outcomes(published) == [
        (PublishOutcome.KEPT, ""),
        STARTED,
        APPLIED,
        (PublishOutcome.IGNORED, "duplicate"),
    ]
    saga = SagaInstance.objects.get(saga_type="tests.model.chain", correlation_key="k")
    assert (saga.step_index, saga.state["items"]) == (3, [1])
    assert SagaInboxEntry.objects.filter(message_id=message_id).count() == 1


# -- how it writes -------------------------------------------------------------------------


def _statements(events: list[Any]) -> int:
    with CaptureQueriesContext(connection) as queries:
        published = publish_many(events)
    assert {p.outcome for p in published} == {PublishOutcome.STARTED}
    return len(queries.captured_queries)


def test_start_events_that_schedule_timers_cost_statements_per_group_not_per_event() -> None:
    one_group = _statements([ReminderRequested(f"a-{n}") for n in range(GROUP_SIZE)])
    three_groups = _statements([ReminderRequested(f"b-{n}") for n in range(3 * GROUP_SIZE)])

    assert SagaTimeout.objects.count() == 4 * GROUP_SIZE
    # Reads of the lookups, the transaction, an INSERT per table (in chunks of a few sizes).
    assert one_group <= 45
    assert three_groups <= 3 * one_group


# -- the input -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "error", "message"),
    [
        (object(), TypeError, r"events\[1\]: builtins.object is not an event"),
        (ReminderRequested, TypeError, r"events\[1\] is the class ReminderRequested"),
        (StepFailed("x"), TypeError, r"events\[1\]: .*StepFailed is not an event"),
    ],
)
def test_a_bad_event_raises_naming_its_position_before_anything_is_written(
    bad: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        publish_many([ReminderRequested("r-good"), bad, ReminderRequested("r-also")])

    assert not SagaInstance.objects.exists()


def test_a_message_id_per_event_is_required_when_message_ids_are_given() -> None:
    with pytest.raises(ValueError, match="2 events but 1 message ids"):
        publish_many([ReminderRequested("a"), ReminderRequested("b")], message_ids=[None])


def test_an_unstorable_message_id_raises_naming_its_position() -> None:
    with pytest.raises(ValueError, match=r"events\[0\]"):
        publish_many([ReminderRequested("a")], message_ids=["not a uuid"])

    assert not SagaInstance.objects.exists()


# -- async, and a caller's transaction -------------------------------------------------------


def test_apublish_many_returns_what_publish_many_would() -> None:
    published = async_to_sync(apublish_many)(
        [ReminderRequested("r-async"), ReminderRequested("r-async")], correlation_id="async"
    )

    assert _outcomes(published) == [STARTED, (PublishOutcome.IGNORED, "not_awaited")]
    assert {p.envelope.correlation_id for p in published} == {"async"}
    assert SagaTimeout.objects.get().correlation_id == "async"


def test_inside_a_callers_transaction_everything_commits_with_it() -> None:
    with transaction.atomic():
        published = publish_many([ReminderRequested("r-inside"), FailingStarted("f-inside")])

    assert _outcomes(published) == [STARTED, (PublishOutcome.FAILED, "")]
    assert list(SagaInstance.objects.values_list("correlation_key", flat=True)) == ["r-inside"]


# -- the docs ------------------------------------------------------------------------------


def test_the_nightly_import_example_of_the_docs_runs() -> None:
    namespace: dict[str, Any] = {}
    example = docs_examples("getting-started.md", "def nightly_import")
    exec(example.replace("from orders.events", "from tests.testapp.events"), namespace)

    report = namespace["nightly_import"](
        [{"id": n, "order_id": f"o-nightly-{n}"} for n in range(3)]
    )

    assert report == {"started": 3}
    assert namespace["nightly_import"]([{"id": 0, "order_id": "o-nightly-0"}]) == {"ignored": 1}
