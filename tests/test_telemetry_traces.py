"""One trace across time: rows written for later store the W3C trace context of the code
that wrote them, and the span that delivers them links to it (docs/observability.md)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.test import override_settings
from freezegun.api import FrozenDateTimeFactory
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext

from bsft_saga import publish, tasks
from bsft_saga.correlation import correlation_scope
from bsft_saga.models import SagaKeptEvent, SagaOutboxMessage, SagaTimeout
from bsft_saga.outbox import deliver_pending
from bsft_saga.telemetry import current_trace_context, trace_context_of
from bsft_saga.timeouts import drain_due
from tests.support import telemetry as telemetry_fixtures
from tests.support.receivers import receiving
from tests.support.telemetry import Telemetry
from tests.testapp.kept_events import Gate, Item, Opened
from tests.testapp.timer_events import ProbeDue, ProbePoked, ProbeStarted

pytestmark = pytest.mark.django_db

Register = Callable[[Callable[[Any, Any], None]], str]


@pytest.fixture(scope="session")
def otel() -> Telemetry:
    return telemetry_fixtures.install()


@pytest.fixture
def spans(otel: Telemetry) -> Callable[[str], list[ReadableSpan]]:
    """The spans of one name finished during this test."""
    exporter = otel.span_exporter
    exporter.clear()
    return otel.spans


def _request_span() -> Any:
    return trace.get_tracer("tests.request").start_as_current_span("request")


def _stored(row: SagaTimeout | SagaOutboxMessage | SagaKeptEvent) -> SpanContext:
    row.refresh_from_db()
    span_context = trace_context_of(row.trace_context)
    assert span_context is not None, row.trace_context
    return span_context


def _schedules_wake(action: Register, *, then: str = "") -> str:
    return action(
        lambda ctx, e: ctx.schedule_timeout(
            "wake", timedelta(days=2), ProbePoked(e.probe_id, action=then)
        )
    )


# --- what is stored ----------------------------------------------------------------------


def test_a_timer_stores_the_trace_context_of_the_step_that_scheduled_it(
    otel: Telemetry, spans: Any, action: Register
) -> None:
    with _request_span():
        publish(ProbeStarted("trace-1", _schedules_wake(action)))

    [step] = spans("saga.step")
    stored = _stored(SagaTimeout.objects.get(name="wake"))
    assert step.context is not None
    assert (stored.trace_id, stored.span_id) == (step.context.trace_id, step.context.span_id)


def test_the_stored_context_is_the_w3c_traceparent(otel: Telemetry, action: Register) -> None:
    with _request_span() as request:
        publish(ProbeStarted("trace-2", _schedules_wake(action)))

    stored = SagaTimeout.objects.get(name="wake").trace_context
    assert stored is not None
    [key] = stored.keys()
    value = stored["traceparent"]
    assert key == "traceparent"
    assert value.startswith(f"00-{request.get_span_context().trace_id:032x}-")


def test_a_step_s_outbox_rows_and_delayed_messages_store_its_trace_context(
    otel: Telemetry, spans: Any, action: Register
) -> None:
    def publishes(ctx: Any, e: Any) -> None:
        ctx.publish(ProbeDue(e.probe_id, "now"))
        ctx.publish(ProbeDue(e.probe_id, "later"), delay=timedelta(hours=1))

    with _request_span():
        publish(ProbeStarted("trace-3", action(publishes)))

    [step] = spans("saga.step")
    assert step.context is not None
    rows = SagaOutboxMessage.objects.filter(saga__correlation_key="trace-3")
    assert rows.count() == 2
    for row in rows:
        assert _stored(row).span_id == step.context.span_id


def test_a_deferred_event_stores_the_trace_context_of_its_publisher(otel: Telemetry) -> None:
    with _request_span() as request:
        publish(ProbeDue("trace-4", "deferred"), delay=timedelta(hours=1))

    row = SagaOutboxMessage.objects.get(saga=None)
    assert _stored(row).span_id == request.get_span_context().span_id


def test_nothing_is_stored_when_no_span_is_current(otel: Telemetry, action: Register) -> None:
    assert current_trace_context() is None
    publish(ProbeDue("trace-5", "deferred"), delay=timedelta(hours=1))

    assert SagaOutboxMessage.objects.get(saga=None).trace_context is None


def test_a_kept_event_stores_the_trace_context_of_its_publisher(otel: Telemetry) -> None:
    publish(Opened("trace-6"))
    with _request_span() as request:
        publish(Item("trace-6", n=1))  # early: the saga waits for a Gate first

    row = SagaKeptEvent.objects.get()
    assert _stored(row).span_id == request.get_span_context().span_id


def test_a_malformed_stored_context_names_no_span() -> None:
    assert trace_context_of(None) is None
    assert trace_context_of({}) is None
    assert trace_context_of({"traceparent": "00-not-a-trace"}) is None
    assert trace_context_of(["00-abc"]) is None


# --- the delivery spans ------------------------------------------------------------------


def _only_link(span: ReadableSpan) -> SpanContext:
    [link] = span.links
    return link.context


def test_a_fired_timer_s_span_starts_a_new_trace_linked_to_the_one_that_scheduled_it(
    otel: Telemetry, spans: Any, clock: FrozenDateTimeFactory, action: Register
) -> None:
    with _request_span() as request:
        publish(ProbeStarted("trace-7", _schedules_wake(action)))
    scheduled = _stored(SagaTimeout.objects.get(name="wake"))

    clock.tick(timedelta(days=2))
    drain_due()

    [timeout] = spans("saga.timeout")
    assert timeout.parent is None  # nothing current in the pass: a fresh root
    assert timeout.context is not None
    assert timeout.context.trace_id != request.get_span_context().trace_id
    linked = _only_link(timeout)
    assert (linked.trace_id, linked.span_id) == (scheduled.trace_id, scheduled.span_id)
    [woken] = [s for s in spans("saga.step") if s.attributes and s.attributes["saga.step.index"]]
    assert woken.parent is not None
    assert woken.parent.span_id == timeout.context.span_id


def test_a_fired_timer_s_span_is_a_child_of_the_pass_s_span(
    otel: Telemetry, spans: Any, clock: FrozenDateTimeFactory, action: Register
) -> None:
    publish(ProbeStarted("trace-8", _schedules_wake(action)))
    clock.tick(timedelta(days=2))

    with trace.get_tracer("tests.task").start_as_current_span("celery.run") as task:
        drain_due()

    [timeout] = spans("saga.timeout")
    assert timeout.parent is not None
    assert timeout.parent.span_id == task.get_span_context().span_id


def test_trace_parent_stored_makes_the_stored_context_the_parent(
    otel: Telemetry, spans: Any, clock: FrozenDateTimeFactory, action: Register
) -> None:
    with _request_span() as request:
        publish(ProbeStarted("trace-9", _schedules_wake(action)))
    scheduled = _stored(SagaTimeout.objects.get(name="wake"))
    clock.tick(timedelta(days=2))

    with (
        override_settings(BSFT_SAGA={"TELEMETRY": {"TRACE_PARENT": "stored"}}),
        trace.get_tracer("tests.task").start_as_current_span("celery.run") as task,
    ):
        drain_due()

    [timeout] = spans("saga.timeout")
    assert timeout.parent is not None
    assert (timeout.parent.trace_id, timeout.parent.span_id) == (
        scheduled.trace_id,
        scheduled.span_id,
    )
    assert timeout.context is not None
    assert timeout.context.trace_id == request.get_span_context().trace_id
    assert _only_link(timeout).span_id == task.get_span_context().span_id


def test_a_timer_without_a_stored_context_has_no_link(
    otel: Telemetry, spans: Any, clock: FrozenDateTimeFactory, action: Register
) -> None:
    publish(ProbeStarted("trace-10", _schedules_wake(action)))
    SagaTimeout.objects.update(trace_context=None)  # written before tracing was set up
    clock.tick(timedelta(days=2))

    drain_due()

    [timeout] = spans("saga.timeout")
    assert timeout.links == ()


def test_a_fired_timer_s_span_carries_the_timer_s_correlation_id(
    otel: Telemetry, spans: Any, clock: FrozenDateTimeFactory, action: Register
) -> None:
    with correlation_scope("order-42"):
        publish(ProbeStarted("trace-11", _schedules_wake(action)))
    clock.tick(timedelta(days=2))

    with correlation_scope("the-dispatcher"):
        drain_due()

    [timeout] = spans("saga.timeout")
    assert timeout.attributes is not None
    assert timeout.attributes["saga.correlation_id"] == "order-42"


def test_a_delayed_message_s_span_links_to_its_publisher(
    otel: Telemetry, spans: Any, clock: FrozenDateTimeFactory
) -> None:
    with correlation_scope("order-43"), _request_span() as request:
        publish(ProbeDue("trace-12", "later"), delay=timedelta(days=2))
    clock.tick(timedelta(days=2))

    with receiving(ProbeDue) as received, correlation_scope("the-dispatcher"):
        deliver_pending()

    assert len(received) == 1
    [deliver] = spans("saga.deliver")
    assert deliver.parent is None
    assert _only_link(deliver).span_id == request.get_span_context().span_id
    assert deliver.attributes is not None
    assert deliver.attributes["saga.correlation_id"] == "order-43"
    assert deliver.attributes["saga.type"] == ""
    assert deliver.attributes["saga.event.type"] == received[0].event_type


@pytest.mark.django_db(transaction=True)  # the kept event is applied after the commit
def test_applying_a_kept_event_links_to_the_trace_that_kept_it(otel: Telemetry, spans: Any) -> None:
    publish(Opened("trace-16"))
    with _request_span() as keeper:
        publish(Item("trace-16", n=1))  # kept: the saga waits for a Gate first
    spans("saga.step")  # the steps so far

    with trace.get_tracer("tests.request").start_as_current_span("gate") as opener:
        publish(Gate("trace-16"))  # reaches the keeping step: the item is applied

    [applied] = spans("saga.apply")
    assert applied.parent is not None
    assert applied.parent.span_id == opener.get_span_context().span_id
    assert _only_link(applied).span_id == keeper.get_span_context().span_id
    assert applied.context is not None
    [step] = [
        s for s in spans("saga.step") if s.parent and s.parent.span_id == applied.context.span_id
    ]
    assert step.attributes is not None
    assert step.attributes["saga.event.type"] == applied.attributes["saga.event.type"]


# --- deliver_event carries the trace through the broker ----------------------------------


@pytest.fixture
def enqueued(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The ``deliver_event`` messages enqueued at commit, kept instead of sent."""
    sent: list[dict[str, Any]] = []

    def apply_async(args: tuple[str], headers: dict[str, Any] | None = None) -> None:
        sent.append({"args": args, "headers": headers})

    def delay(message_id: str) -> None:
        sent.append({"args": (message_id,), "headers": None})

    monkeypatch.setattr(tasks.deliver_event, "apply_async", apply_async)
    monkeypatch.setattr(tasks.deliver_event, "delay", delay)
    return sent


@pytest.mark.django_db(transaction=True)
def test_deliver_event_continues_the_trace_whose_commit_enqueued_it(
    otel: Telemetry, spans: Any, enqueued: list[dict[str, Any]]
) -> None:
    request, message = _deferred_in_a_request("trace-13", enqueued)
    stored = current_trace_context_of(request)
    assert stored is not None
    assert message["headers"] == {f"bsft_saga_{key}": value for key, value in stored.items()}

    # What a worker does with the message: no span of its own is current there.
    with receiving(ProbeDue) as received:
        assert tasks.deliver_event.apply(message["args"], headers=message["headers"]).get() == 1

    assert len(received) == 1
    assert _deliver_span_s_parent(spans) == request.get_span_context().span_id


@pytest.mark.django_db(transaction=True)
def test_an_instrumented_task_s_own_span_stays_the_parent(
    otel: Telemetry, spans: Any, enqueued: list[dict[str, Any]]
) -> None:
    _, message = _deferred_in_a_request("trace-14", enqueued)

    with trace.get_tracer("tests.task").start_as_current_span("run/deliver_event") as task:
        tasks.deliver_event.apply(message["args"], headers=message["headers"])

    assert _deliver_span_s_parent(spans) == task.get_span_context().span_id


@pytest.mark.django_db(transaction=True)
def test_with_the_celery_instrumentation_its_task_span_is_the_parent(
    otel: Telemetry, spans: Any, enqueued: list[dict[str, Any]]
) -> None:
    instrumentation = pytest.importorskip("opentelemetry.instrumentation.celery")
    _, message = _deferred_in_a_request("trace-17", enqueued)

    instrumentor = instrumentation.CeleryInstrumentor()
    instrumentor.instrument()
    try:
        tasks.deliver_event.apply(message["args"], headers=message["headers"])
    finally:
        instrumentor.uninstrument()

    [task] = spans(f"run/{tasks.deliver_event.name}")
    assert task.context is not None
    assert _deliver_span_s_parent(spans) == task.context.span_id


@pytest.mark.django_db(transaction=True)
def test_without_a_current_span_the_message_carries_no_trace(
    otel: Telemetry, enqueued: list[dict[str, Any]]
) -> None:
    publish(ProbeDue("trace-15", "deferred"), defer=True)

    assert [message["headers"] for message in enqueued] == [None]


def _deferred_in_a_request(probe_id: str, enqueued: list[dict[str, Any]]) -> tuple[Any, Any]:
    """Publish a deferred event inside a request span; return the span and the one
    ``deliver_event`` message its commit enqueued."""
    with _request_span() as request:
        publish(ProbeDue(probe_id, "deferred"), defer=True)
    [message] = enqueued
    return request, message


def _deliver_span_s_parent(spans: Any) -> int:
    """The span id of the parent of the one ``saga.deliver`` span."""
    [deliver] = spans("saga.deliver")
    assert deliver.parent is not None
    return deliver.parent.span_id


def current_trace_context_of(span: Any) -> dict[str, str] | None:
    with trace.use_span(span):
        return current_trace_context()
