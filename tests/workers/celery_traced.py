"""``tests.settings`` plus an OpenTelemetry SDK that writes each finished span to a file,
for a worker whose traces a test reads (tests/processes/test_celery_traces.py).

``BSFT_SAGA_SPANS_FILE``: the file each span is appended to, one JSON object a line (its
name, trace and span ids, parent span id and links, as 32 and 16 hex digits).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from tests.settings import *  # noqa: F403


class _SpansToFile(SpanExporter):
    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self.path, "a") as out:
            for span in spans:
                out.write(json.dumps(_as_dict(span)) + "\n")
        return SpanExportResult.SUCCESS


def _as_dict(span: ReadableSpan) -> dict[str, object]:
    assert span.context is not None
    return {
        "name": span.name,
        "trace_id": f"{span.context.trace_id:032x}",
        "span_id": f"{span.context.span_id:016x}",
        "parent_id": None if span.parent is None else f"{span.parent.span_id:016x}",
        "links": [f"{link.context.span_id:016x}" for link in span.links],
    }


_provider = TracerProvider()
_provider.add_span_processor(SimpleSpanProcessor(_SpansToFile(os.environ["BSFT_SAGA_SPANS_FILE"])))
trace.set_tracer_provider(_provider)
