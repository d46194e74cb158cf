"""One order, end to end, in traces and logs: an HTTP request starts the saga, its step
schedules a timer, two days later a drain fires it, the woken step publishes an event
through the outbox and a receiver handles it (docs/observability.md, "One trace across
time"). Every span is there, parented and linked as documented, and every log record of
the path names the order's correlation id."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.test import Client, override_settings
from django.urls import path
from freezegun.api import FrozenDateTimeFactory
from opentelemetry.instrumentation.django import DjangoInstrumentor
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind

from bsft_saga import publish
from bsft_saga.models import SagaInstance
from bsft_saga.signals import event_published
from bsft_saga.timeouts import drain_due
from tests.support import telemetry as telemetry_fixtures
from tests.support.logs import Collected
from tests.support.telemetry import Telemetry
from tests.testapp.timer_events import ProbeDue, ProbePoked, ProbeStarted
from tests.testapp.timer_flows import PROBE_ACTIONS

pytestmark = pytest.mark.django_db(transaction=True)

log = logging.getLogger("tests.journey")

ORDER = "order-77"
CORRELATION_ID = "checkout-77"


def _send_reminder(ctx: Any, e: ProbePoked) -> None:
    log.info("step 1: the follow-up is due, sending the reminder")
    ctx.publish(ProbeDue(e.probe_id, "reminder"))


def _schedule_follow_up(ctx: Any, e: ProbeStarted) -> None:
    log.info("step 0: order placed, follow-up in two days")
    ctx.schedule_timeout(
        "follow-up", timedelta(days=2), ProbePoked(e.probe_id, action="journey.remind")
    )


def place_order(request: HttpRequest) -> HttpResponse:
    log.info("view: placing the order")
    publish(ProbeStarted(ORDER, action="journey.place"))
    return HttpResponse("placed")


urlpatterns = [path("orders/", place_order)]


@pytest.fixture
def records() -> Iterator[list[logging.LogRecord]]:
    """Every record of the test's own loggers and of bsft_saga, at DEBUG."""
    handler = Collected()
    loggers = [logging.getLogger(name) for name in ("tests.journey", "bsft_saga")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    yield handler.records
    for logger, level in zip(loggers, levels, strict=True):
        logger.removeHandler(handler)
        logger.setLevel(level)


@pytest.fixture
def instrumented_django() -> Iterator[None]:
    with override_settings(ROOT_URLCONF=__name__, MIDDLEWARE=list(settings.MIDDLEWARE)):
        DjangoInstrumentor().instrument()
        try:
            yield
        finally:
            DjangoInstrumentor().uninstrument()


@pytest.fixture
def receiver() -> Iterator[list[str]]:
    """A plain receiver of the reminder, which logs as it sends it."""
    sent: list[str] = []

    def send(sender: type, *, envelope: Any, **kwargs: Any) -> None:
        log.info("receiver: reminder mailed")
        sent.append(envelope.event.probe_id)

    event_published.connect(send, sender=ProbeDue, weak=False)
    yield sent
    event_published.disconnect(send, sender=ProbeDue)


@pytest.fixture
def otel(monkeypatch: pytest.MonkeyPatch) -> Telemetry:
    monkeypatch.setitem(PROBE_ACTIONS, "journey.place", _schedule_follow_up)
    monkeypatch.setitem(PROBE_ACTIONS, "journey.remind", _send_reminder)
    installed = telemetry_fixtures.install()
    installed.span_exporter.clear()
    return installed


def _one(spans: list[ReadableSpan], name: str, **attributes: object) -> ReadableSpan:
    [span] = [
        s
        for s in spans
        if s.name == name
        and all((s.attributes or {}).get(key) == value for key, value in attributes.items())
    ]
    return span


def _is_child_of(span: ReadableSpan, parent: ReadableSpan) -> bool:
    assert parent.context is not None
    return span.parent is not None and span.parent.span_id == parent.context.span_id


def _links_to(span: ReadableSpan, target: ReadableSpan) -> bool:
    assert target.context is not None
    return [(link.context.trace_id, link.context.span_id) for link in span.links] == [
        (target.context.trace_id, target.context.span_id)
    ]


def test_one_order_is_followed_from_the_request_to_the_receiver_two_days_later(
    otel: Telemetry,
    clock: FrozenDateTimeFactory,
    instrumented_django: None,
    receiver: list[str],
    records: list[logging.LogRecord],
) -> None:
    response = Client().get("/orders/", headers={"X-Correlation-ID": CORRELATION_ID})
    assert response.status_code == 200

    clock.tick(timedelta(days=2))
    report = drain_due()

    assert report.fired == 1
    assert receiver == [ORDER]
    spans = list(otel.span_exporter.get_finished_spans())
    [request] = [s for s in spans if s.kind is SpanKind.SERVER]
    placed = _one(spans, "saga.step", **{"saga.step.index": 0})
    timeout = _one(spans, "saga.timeout", **{"saga.timeout.name": "follow-up"})
    woken = _one(spans, "saga.step", **{"saga.step.index": 1})
    deliver = _one(spans, "saga.deliver")
    # Monday's trace: the request and the step it ran.
    assert request.parent is None
    assert _is_child_of(placed, request)
    # Wednesday: the drain's timer starts a trace of its own, linked to the step that
    # scheduled it; the step it wakes is its child.
    assert timeout.parent is None
    assert _links_to(timeout, placed)
    assert _is_child_of(woken, timeout)
    # The woken step's event, delivered after its commit, links to that step.
    assert _links_to(deliver, woken)
    ours = [s for s in spans if s.name.startswith("saga.")]
    assert {(s.attributes or {}).get("saga.correlation_id") for s in ours} == {CORRELATION_ID}
    # Every record of the path (the view's, both steps', the receiver's, and any of
    # bsft_saga's own) names the order's correlation id; those written for the saga name it.
    assert [r.getMessage() for r in records if r.name == "tests.journey"] == [
        "view: placing the order",
        "step 0: order placed, follow-up in two days",
        "step 1: the follow-up is due, sending the reminder",
        "receiver: reminder mailed",
    ]
    assert {r.correlation_id for r in records} == {CORRELATION_ID}  # type: ignore[attr-defined]
    saga = SagaInstance.objects.get(correlation_key=ORDER)
    in_the_saga = [r for r in records if r.name == "tests.journey" and "view" not in r.msg]
    assert {(r.saga_type, r.saga_key, r.saga_id) for r in in_the_saga} == {  # type: ignore[attr-defined]
        (saga.saga_type, ORDER, str(saga.pk))
    }
