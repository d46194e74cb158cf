"""A deferred event delivered by a real Celery worker continues the trace of the request
whose commit enqueued it: ``deliver_event`` carries the trace context through the broker,
Redis and RabbitMQ alike (docs/celery.md, "Traces through the broker").

The worker runs with ``DJANGO_SETTINGS_MODULE=tests.workers.celery_traced``: the test
settings plus an OpenTelemetry SDK that writes every span to a file this test reads.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace

from bsft_saga import publish
from bsft_saga.models import SagaOutboxMessage
from tests.support import telemetry as telemetry_fixtures
from tests.support.celery_workers import BROKERS, Worker, enqueuing_to, wait_for
from tests.testapp.events import TaskOpened

pytestmark = [pytest.mark.celery, pytest.mark.slow]


def _spans(path: Path) -> dict[str, dict[str, Any]]:
    """The worker's finished spans by name (the last of each)."""
    lines = path.read_text().splitlines() if path.exists() else []
    return {span["name"]: span for span in map(json.loads, lines)}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("broker_url", BROKERS, indirect=True)
def test_a_worker_s_delivery_of_a_deferred_event_continues_the_request_s_trace(
    start_worker: Callable[..., Worker], broker_url: str, tmp_path: Path
) -> None:
    telemetry_fixtures.install()  # this process traces too: the request's span is real
    spans_file = tmp_path / "worker-spans.jsonl"
    worker = start_worker(
        beat=False,  # only deliver_event can deliver the row
        env={
            "DJANGO_SETTINGS_MODULE": "tests.workers.celery_traced",
            "BSFT_SAGA_SPANS_FILE": str(spans_file),
        },
    )

    tracer = trace.get_tracer("tests.request")
    with enqueuing_to(broker_url), tracer.start_as_current_span("POST /tasks") as request:
        envelope = publish(TaskOpened("t-traced", nudge_after_seconds=3600), defer=True)

    wait_for(
        lambda: SagaOutboxMessage.objects.filter(
            pk=envelope.message_id, delivered_at__isnull=False
        ).first(),
        worker,
    )
    spans = wait_for(
        lambda: s if {"saga.deliver", "saga.step"} <= (s := _spans(spans_file)).keys() else None,
        worker,
    )
    scheme = broker_url.split(":", 1)[0]
    assert f"Connected to {scheme}://" in worker.log()  # the broker of this run
    context = request.get_span_context()
    deliver, step = spans["saga.deliver"], spans["saga.step"]
    assert deliver["trace_id"] == step["trace_id"] == f"{context.trace_id:032x}"
    assert deliver["parent_id"] == f"{context.span_id:016x}"
    assert deliver["links"] == [f"{context.span_id:016x}"]  # the row's stored context
    assert step["parent_id"] == deliver["span_id"]
