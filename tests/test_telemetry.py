"""OpenTelemetry counters, the step duration histogram and the saga spans."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from bsft_saga import telemetry
from bsft_saga.correlation import correlation_scope
from bsft_saga.telemetry import COUNTERS, METER_NAME, TRACER_NAME, count, step_span, timer_span
from tests.support import telemetry as telemetry_fixtures
from tests.support.examples import ROOT, docs_examples, run_python
from tests.support.telemetry import Telemetry


@pytest.fixture(scope="session")
def otel() -> Telemetry:
    return telemetry_fixtures.install()


@pytest.fixture
def saga_type() -> str:
    """A saga type no other test emits for, so absolute values need no baseline."""
    return f"tests.telemetry-{uuid.uuid4().hex[:8]}"


def _spans(otel: Telemetry, name: str, saga_type: str) -> list[ReadableSpan]:
    return [
        span
        for span in otel.spans(name)
        if span.attributes is not None and span.attributes.get("saga.type") == saga_type
    ]


def test_meter_and_tracer_are_named_bsft_saga() -> None:
    assert METER_NAME == TRACER_NAME == "bsft.saga"


# --- counters -------------------------------------------------------------------------


@pytest.mark.parametrize("instrument", sorted(COUNTERS))
def test_count_adds_to_the_named_counter_with_the_saga_type(
    otel: Telemetry, saga_type: str, instrument: str
) -> None:
    name = f"bsft.saga.{instrument}"
    other_before = otel.counter_value(name, **{"saga.type": "tests.other"})

    count(instrument, saga_type)
    count(instrument, saga_type, amount=2)

    assert name in otel.metric_names()
    assert otel.counter_value(name, **{"saga.type": saga_type}) == 3
    assert otel.counter_value(name, **{"saga.type": "tests.other"}) == other_before


def test_the_counters_are_the_documented_ones() -> None:
    assert set(COUNTERS) == {
        "started",
        "completed",
        "timeout.scheduled",
        "timeout.fired",
        "timeout.canceled",
        "timeout.missed",
        "timeout.dead_lettered",
        "outbox.dead_lettered",
        "kept.dead_lettered",
        "event.ignored",
    }


def test_count_is_a_delta_on_a_shared_saga_type(otel: Telemetry) -> None:
    attributes = {"saga.type": "quotes.follow-up"}
    before = otel.counter_value("bsft.saga.timeout.fired", **attributes)

    count("timeout.fired", "quotes.follow-up")

    assert otel.counter_value("bsft.saga.timeout.fired", **attributes) == before + 1


@pytest.mark.parametrize("instrument", ["unknown", "bsft.saga.started", "step.duration", ""])
def test_count_rejects_an_unknown_instrument(instrument: str) -> None:
    with pytest.raises(ValueError, match="Unknown bsft_saga counter"):
        count(instrument, "quotes.follow-up")


def test_count_rejects_a_negative_amount(otel: Telemetry, saga_type: str) -> None:
    with pytest.raises(ValueError, match="only goes up"):
        count("timeout.canceled", saga_type, amount=-1)

    assert otel.counter_value("bsft.saga.timeout.canceled", **{"saga.type": saga_type}) == 0


def test_count_of_zero_records_nothing(otel: Telemetry, saga_type: str) -> None:
    count("timeout.scheduled", saga_type, amount=0)

    assert otel.points("bsft.saga.timeout.scheduled", **{"saga.type": saga_type}) == []


# --- saga.step ------------------------------------------------------------------------


def test_step_span_records_a_saga_step_span_with_its_attributes(
    otel: Telemetry, saga_type: str
) -> None:
    with step_span(saga_type, step_index=2, event_type="quotes.accepted") as span:
        assert span.is_recording()

    [finished] = _spans(otel, "saga.step", saga_type)
    assert finished.attributes is not None
    assert finished.attributes["saga.step.index"] == 2
    assert finished.attributes["saga.event.type"] == "quotes.accepted"
    assert finished.instrumentation_scope is not None
    assert finished.instrumentation_scope.name == "bsft.saga"
    assert finished.status.status_code is not StatusCode.ERROR


def test_step_span_records_the_duration_in_seconds(otel: Telemetry, saga_type: str) -> None:
    with step_span(saga_type, step_index=1, event_type="quotes.sent"):
        pass

    [point] = otel.histogram_points("bsft.saga.step.duration", **{"saga.type": saga_type})
    assert point.count == 1
    assert 0 <= point.sum < 60
    assert otel.metric_unit("bsft.saga.step.duration") == "s"


def test_step_duration_is_measured_with_perf_counter(
    otel: Telemetry, saga_type: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ticks: Iterator[float] = iter([1000.0, 1002.5])
    monkeypatch.setattr(telemetry.time, "perf_counter", lambda: next(ticks))

    with step_span(saga_type, step_index=1, event_type="quotes.sent"):
        pass

    monkeypatch.undo()
    [point] = otel.histogram_points("bsft.saga.step.duration", **{"saga.type": saga_type})
    assert point.sum == pytest.approx(2.5)


def test_step_span_records_the_exception_and_reraises(otel: Telemetry, saga_type: str) -> None:
    with (
        pytest.raises(LookupError, match="no such quote"),
        step_span(saga_type, step_index=1, event_type="quotes.sent"),
    ):
        raise LookupError("no such quote")

    [finished] = _spans(otel, "saga.step", saga_type)
    assert finished.status.status_code is StatusCode.ERROR
    [exception_event] = [event for event in finished.events if event.name == "exception"]
    assert exception_event.attributes is not None
    assert exception_event.attributes["exception.type"] == "LookupError"
    assert exception_event.attributes["exception.message"] == "no such quote"
    # A failed step is still timed.
    [point] = otel.histogram_points("bsft.saga.step.duration", **{"saga.type": saga_type})
    assert point.count == 1


def test_spans_carry_the_ambient_correlation_id(otel: Telemetry, saga_type: str) -> None:
    with correlation_scope("req-42"), step_span(saga_type, step_index=1, event_type="e"):
        pass
    with step_span(saga_type, step_index=2, event_type="e"):
        pass

    first, second = _spans(otel, "saga.step", saga_type)
    assert first.attributes is not None
    assert second.attributes is not None
    assert first.attributes["saga.correlation_id"] == "req-42"
    assert "saga.correlation_id" not in second.attributes


# --- saga.timeout ---------------------------------------------------------------------


def test_timer_span_records_the_saga_type_and_timer_name(otel: Telemetry, saga_type: str) -> None:
    with timer_span(saga_type, "reminder-1"):
        pass

    [finished] = _spans(otel, "saga.timeout", saga_type)
    assert finished.attributes is not None
    assert finished.attributes["saga.timeout.name"] == "reminder-1"


def test_a_step_run_by_a_timer_is_a_child_of_its_timer_span(
    otel: Telemetry, saga_type: str
) -> None:
    with (
        timer_span(saga_type, "reminder-1"),
        step_span(saga_type, step_index=2, event_type="quotes.reminder-due"),
    ):
        pass

    [timeout] = _spans(otel, "saga.timeout", saga_type)
    [step] = _spans(otel, "saga.step", saga_type)
    assert step.parent is not None
    assert timeout.context is not None
    assert step.parent.span_id == timeout.context.span_id


def test_timer_span_records_the_exception_and_reraises(otel: Telemetry, saga_type: str) -> None:
    with pytest.raises(RuntimeError, match="receiver failed"), timer_span(saga_type, "t"):
        raise RuntimeError("receiver failed")

    [finished] = _spans(otel, "saga.timeout", saga_type)
    assert finished.status.status_code is StatusCode.ERROR
    assert [event.name for event in finished.events] == ["exception"]


# --- providers installed late ---------------------------------------------------------


def test_a_provider_installed_after_first_use_still_receives_measurements_and_spans() -> None:
    # A fresh interpreter: in this one the global providers are already set.
    script = textwrap.dedent(
        """
        from bsft_saga import telemetry

        telemetry.count("started", "late")  # before any SDK: goes nowhere
        with telemetry.step_span("late", step_index=1, event_type="e"):
            pass

        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )

        reader = InMemoryMetricReader()
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        exporter = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(tracer_provider)

        telemetry.count("started", "late", amount=5)
        with telemetry.timer_span("late", "t"):
            pass

        values = {
            metric.name: sum(point.value for point in metric.data.data_points)
            for rm in reader.get_metrics_data().resource_metrics
            for sm in rm.scope_metrics
            for metric in sm.metrics
            if metric.name == "bsft.saga.started"
        }
        print(values["bsft.saga.started"], [s.name for s in exporter.get_finished_spans()])
        """
    )
    result = run_python(script)

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "5 ['saga.timeout']"


def test_without_a_tracer_provider_no_span_is_started() -> None:
    # A fresh interpreter, where no SDK is installed: every step and every fired timer opens
    # a span, and the API's no-op ones are not free. The step's duration is still measured.
    script = textwrap.dedent(
        """
        from opentelemetry import trace

        def refuse(*args, **kwargs):
            raise AssertionError("a tracer was asked for a span that goes nowhere")

        trace.get_tracer = refuse
        from bsft_saga import telemetry

        with telemetry.step_span("quiet", step_index=1, event_type="e") as step:
            with telemetry.timer_span("quiet", "t") as timer:
                assert trace.get_current_span() is trace.INVALID_SPAN
        print(step is timer is trace.INVALID_SPAN)
        """
    )
    result = run_python(script)

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"


# --- the examples in docs/observability.md --------------------------------------------


def _docs_example(marker: str) -> str:
    return docs_examples("observability.md", marker)


def test_without_a_tracer_provider_nothing_is_stored_with_a_row() -> None:
    # Even under a valid span (one a caller's own propagation made current).
    script = textwrap.dedent(
        """
        from opentelemetry import trace
        from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

        from bsft_saga import telemetry

        remote = SpanContext(1, 2, is_remote=True, trace_flags=TraceFlags(1))
        with trace.use_span(NonRecordingSpan(remote)):
            print(telemetry.current_trace_context())
        """
    )
    result = run_python(script)

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "None"


def test_the_sdk_setup_example_exports_bsft_saga_spans_and_metrics() -> None:
    script = _docs_example("def configure_opentelemetry") + textwrap.dedent(
        """
        from bsft_saga import telemetry

        configure_opentelemetry("docs-example")
        telemetry.count("started", "docs.flow")
        with telemetry.step_span("docs.flow", step_index=1, event_type="docs.started"):
            pass
        trace.get_tracer_provider().force_flush()
        metrics.get_meter_provider().force_flush()
        """
    )

    result = run_python(script)

    assert result.returncode == 0, result.stderr
    assert '"name": "saga.step"' in result.stdout
    assert '"name": "bsft.saga.started"' in result.stdout
    assert '"service.name": "docs-example"' in result.stdout


def test_the_testing_fixture_example_collects_counts_and_spans(tmp_path: Path) -> None:
    test_file = tmp_path / "test_docs_example.py"
    test_file.write_text(
        _docs_example("def otel()")
        + textwrap.dedent(
            """
            from bsft_saga import telemetry


            def test_counts(otel):
                reader, exporter = otel
                telemetry.count("completed", "docs.flow")
                with telemetry.timer_span("docs.flow", "reminder"):
                    pass
                names = [
                    metric.name
                    for rm in reader.get_metrics_data().resource_metrics
                    for sm in rm.scope_metrics
                    for metric in sm.metrics
                ]
                assert "bsft.saga.completed" in names
                assert [s.name for s in exporter.get_finished_spans()] == ["saga.timeout"]
            """
        )
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\nfilterwarnings = error\n")

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:django",
            "-p",
            "no:cacheprovider",
            "-c",
            str(tmp_path / "pytest.ini"),
            str(test_file),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )

    assert result.returncode == 0, result.stdout + result.stderr
