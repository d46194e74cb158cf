"""In-memory OpenTelemetry SDK providers for the test process.

OpenTelemetry lets the global meter and tracer providers be set only once per process, so
:func:`install` sets them the first time and returns the same readers afterwards. Any test
module may call it (typically from a session-scoped fixture). Other tests may emit too:
read counters as deltas, or use a saga type unique to the test.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    DataPointT,
    HistogramDataPoint,
    InMemoryMetricReader,
    Metric,
    NumberDataPoint,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from bsft_saga.telemetry import METER_NAME


@dataclass(frozen=True)
class Telemetry:
    """The readers behind the process-wide SDK providers."""

    metric_reader: InMemoryMetricReader
    span_exporter: InMemorySpanExporter

    def counter_value(self, name: str, **attributes: object) -> int:
        """Return the cumulative value of counter ``name`` over points matching ``attributes``."""
        return sum(
            int(point.value)
            for point in self._points(name)
            if isinstance(point, NumberDataPoint) and _matches(point.attributes, attributes)
        )

    def histogram_points(self, name: str, **attributes: object) -> list[HistogramDataPoint]:
        """Return the cumulative data points of histogram ``name`` matching ``attributes``."""
        return [
            point
            for point in self._points(name)
            if isinstance(point, HistogramDataPoint) and _matches(point.attributes, attributes)
        ]

    def points(self, name: str, **attributes: object) -> list[DataPointT]:
        """Return every data point of instrument ``name`` matching ``attributes``."""
        return [point for point in self._points(name) if _matches(point.attributes, attributes)]

    def metric_unit(self, name: str) -> str | None:
        """Return the unit instrument ``name`` was created with."""
        units = {metric.unit for metric in self._metrics() if metric.name == name}
        assert len(units) == 1, f"no single metric {name!r}: {units}"
        return units.pop()

    def metric_names(self) -> set[str]:
        """Return the names of the instruments of the ``bsft.saga`` meter seen so far."""
        return {metric.name for metric in self._metrics()}

    def spans(self, name: str) -> list[ReadableSpan]:
        """Return the finished spans called ``name``."""
        return [span for span in self.span_exporter.get_finished_spans() if span.name == name]

    def _metrics(self) -> list[Metric]:
        data = self.metric_reader.get_metrics_data()
        if data is None:
            return []
        return [
            metric
            for resource_metrics in data.resource_metrics
            for scope_metrics in resource_metrics.scope_metrics
            if scope_metrics.scope.name == METER_NAME
            for metric in scope_metrics.metrics
        ]

    def _points(self, name: str) -> list[DataPointT]:
        return [
            point
            for metric in self._metrics()
            if metric.name == name
            for point in metric.data.data_points
        ]


def _matches(actual: Mapping[str, object] | None, expected: Mapping[str, object]) -> bool:
    actual = actual or {}
    return all(actual.get(key) == value for key, value in expected.items())


_lock = threading.Lock()
_installed: Telemetry | None = None


def install() -> Telemetry:
    """Install in-memory SDK providers as the global ones (once) and return their readers."""
    global _installed
    with _lock:
        if _installed is None:
            reader = InMemoryMetricReader()
            meter_provider = MeterProvider(metric_readers=[reader])
            exporter = InMemorySpanExporter()
            tracer_provider = TracerProvider()
            tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
            metrics.set_meter_provider(meter_provider)
            trace.set_tracer_provider(tracer_provider)
            if (
                metrics.get_meter_provider() is not meter_provider
                or trace.get_tracer_provider() is not tracer_provider
            ):
                raise RuntimeError(
                    "Another OpenTelemetry provider was installed before "
                    "tests.support.telemetry.install(); use install() everywhere."
                )
            _installed = Telemetry(reader, exporter)
        return _installed
