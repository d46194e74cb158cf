"""OpenTelemetry metrics and spans for sagas and timers.

bsft_saga depends only on ``opentelemetry-api``. Without an SDK configured by the host
project every call here is a cheap no-op; with one, the meter and the tracer named
``bsft.saga`` report:

========================================  =========  ============================================
instrument                                kind       counts / measures
========================================  =========  ============================================
``bsft.saga.started``                     counter    saga instances created by a start event
``bsft.saga.completed``                   counter    saga instances completed
``bsft.saga.timeout.scheduled``           counter    timers written by a step
``bsft.saga.timeout.fired``               counter    timers whose event was published
``bsft.saga.timeout.canceled``            counter    pending timers canceled
``bsft.saga.timeout.missed``              counter    timers skipped by the catch-up policy
``bsft.saga.timeout.dead_lettered``       counter    timers given up after repeated failures
``bsft.saga.outbox.dead_lettered``        counter    deferred/staged events given up likewise
``bsft.saga.event.ignored``               counter    events a flow knows but no instance took
``bsft.saga.step.duration``               histogram  wall time of one step, in seconds
``bsft.saga.timeout.lag``                 gauge      seconds the oldest due timer or due
                                                     outbox row is late (``saga_status``)
``bsft.saga.timeout.due``                 gauge      pending timers that are due
``bsft.saga.dead_letters``                gauge      dead-lettered timers and outbox rows stored
========================================  =========  ============================================

Every counter and histogram measurement carries the attribute ``saga.type`` (``""`` for an
outbox row of no saga); ``bsft.saga.event.ignored`` also carries ``reason``: ``no_instance``,
``not_awaited``, ``duplicate`` or ``timer_never_starts``. The gauges are observed when the
metrics are collected (by the host's metric reader, e.g. every 60 s), one data point each
and without attributes:
a small indexed query per gauge, never one per instance (:mod:`bsft_saga.status`). Spans:
``saga.step`` (attributes
``saga.type``, ``saga.step.index``, ``saga.event.type``), ``saga.timeout`` (``saga.type``,
``saga.timeout.name``), ``saga.deliver`` and ``saga.apply`` (``saga.type``,
``saga.event.type``); each adds ``saga.correlation_id`` when an ambient correlation id is set.

A row written for later (a timer, an outbox row, a kept event) stores the W3C trace context
current when it was written (:func:`current_trace_context`). The span that delivers or
applies it (:func:`timer_span`, :func:`deliver_span`, :func:`apply_span`) links to that
context, or takes it as its parent under ``TELEMETRY.TRACE_PARENT = "stored"``.

The meter and the tracer are obtained at first use, never at import, so a provider that the
host installs after importing bsft_saga (in ``settings.py``, ``wsgi.py``, a Celery signal)
still receives everything. Instruments are created once and cached: when they were created
before the host installed its provider, they are the API's proxy instruments, which forward
to the real provider as soon as it is set. Until a tracer provider is installed a span
costs nothing: none is started and no context is attached (every step and every fired
timer opens one, and the API's no-op spans cost more than the rest of a fired timer's
telemetry together).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from functools import cache
from types import MappingProxyType
from typing import Final

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.metrics import CallbackOptions, Counter, Histogram, Meter, Observation
from opentelemetry.trace import (
    INVALID_SPAN,
    Link,
    NonRecordingSpan,
    Span,
    SpanContext,
    Status,
    StatusCode,
    Tracer,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import Attributes

from bsft_saga import __version__
from bsft_saga.conf import saga_settings
from bsft_saga.correlation import get_correlation_id

__all__ = [
    "COUNTERS",
    "GAUGES",
    "METER_NAME",
    "STEP_DURATION",
    "TRACER_NAME",
    "apply_span",
    "continued",
    "count",
    "count_ignored",
    "current_trace_context",
    "deliver_span",
    "install_gauges",
    "step_span",
    "timer_span",
    "trace_context_of",
]

logger = logging.getLogger(__name__)

METER_NAME: Final = "bsft.saga"
TRACER_NAME: Final = "bsft.saga"

#: Counter suffixes accepted by :func:`count` (the full name is ``bsft.saga.<suffix>``),
#: with the description exported alongside each.
COUNTERS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "started": "Saga instances created by a start event.",
        "completed": "Saga instances completed.",
        "timeout.scheduled": "Timers written by a saga step.",
        "timeout.fired": "Timers whose event was published.",
        "timeout.canceled": "Pending timers canceled by a step, the end of a wait, or completion.",
        "timeout.missed": "Due timers skipped by the catch-up policy.",
        "timeout.dead_lettered": "Timers given up after MAX_DISPATCH_ATTEMPTS failed dispatches.",
        "outbox.dead_lettered": "Outbox rows given up after MAX_DISPATCH_ATTEMPTS deliveries.",
        "kept.dead_lettered": "Kept events given up after MAX_DISPATCH_ATTEMPTS failed attempts.",
        "event.ignored": "Events a flow awaits somewhere that no instance took, by reason.",
    }
)
#: Full name of the step duration histogram.
STEP_DURATION: Final = "bsft.saga.step.duration"
#: Observable gauges by full name: (unit, description). See :func:`install_gauges`. The
#: counts carry UCUM annotations rather than "1", which Prometheus exporters would turn
#: into a ``_ratio`` suffix.
GAUGES: Final[Mapping[str, tuple[str, str]]] = MappingProxyType(
    {
        "bsft.saga.timeout.lag": (
            "s",
            "How late the oldest due timer or due outbox row is; 0 when none is.",
        ),
        "bsft.saga.timeout.due": ("{timer}", "Pending timers whose due time has passed."),
        "bsft.saga.dead_letters": (
            "{row}",
            "Dead-lettered timers, outbox rows and kept events still stored.",
        ),
    }
)

ATTR_SAGA_TYPE: Final = "saga.type"
ATTR_STEP_INDEX: Final = "saga.step.index"
ATTR_EVENT_TYPE: Final = "saga.event.type"
ATTR_TIMEOUT_NAME: Final = "saga.timeout.name"
ATTR_CORRELATION_ID: Final = "saga.correlation_id"
ATTR_REASON: Final = "reason"

#: The ``reason`` values of ``bsft.saga.event.ignored``.
IGNORED_REASONS: Final = (
    "no_instance",
    "not_awaited",
    "duplicate",
    "timer_never_starts",
    "kept_limit",
)


@cache
def _meter() -> Meter:
    # Before the host installs a provider these are the API's proxies, which switch to the
    # real provider once one is set, so creating them once, at first use, is safe.
    return metrics.get_meter(METER_NAME, __version__)


@cache
def _counter(instrument: str) -> Counter:
    if instrument not in COUNTERS:
        raise ValueError(
            f"Unknown bsft_saga counter {instrument!r}; expected one of {sorted(COUNTERS)}."
        )
    return _meter().create_counter(
        f"{METER_NAME}.{instrument}", unit="1", description=COUNTERS[instrument]
    )


@cache
def _step_duration() -> Histogram:
    return _meter().create_histogram(
        STEP_DURATION, unit="s", description="Wall time of one saga step."
    )


@cache
def install_gauges() -> None:
    """Create the observable gauges of :data:`GAUGES` on the ``bsft.saga`` meter, once.

    Called by ``AppConfig.ready()``; before the host installs a provider they are the API's
    proxies, which pass their callbacks on to the real provider once it is set. Each
    callback runs when the host's reader collects, in the reader's thread: it reads one
    number from :mod:`bsft_saga.status` (closing the thread's database connection afterwards
    by Django's usual rules, as a request would) and reports nothing when the database
    cannot answer (a warning is logged), so a metrics export never fails because of it.
    """
    from bsft_saga import status  # the models: only once the app registry is ready

    readings: dict[str, Callable[[], float]] = {
        "bsft.saga.timeout.lag": status.lag_seconds,
        "bsft.saga.timeout.due": status.due_timers,
        "bsft.saga.dead_letters": status.dead_letters,
    }
    for name, read in readings.items():
        unit, description = GAUGES[name]
        _meter().create_observable_gauge(
            name, callbacks=[_observer(name, read)], unit=unit, description=description
        )


def _observer(
    name: str, read: Callable[[], float]
) -> Callable[[CallbackOptions], Iterable[Observation]]:
    def observe(options: CallbackOptions) -> Iterable[Observation]:
        from bsft_saga.db.connections import refresh_idle_connections

        try:
            refresh_idle_connections()  # a broken or expired connection from the last time
            value = read()
            refresh_idle_connections()
        except Exception as exc:
            logger.warning("bsft_saga: gauge %s not observed: %r", name, exc)
            return []
        return [Observation(value)]

    return observe


@cache
def _tracer() -> Tracer:
    return trace.get_tracer(TRACER_NAME, __version__)


#: The API's tracer providers that record nothing: its proxy, until the host installs one,
#: and the no-op provider (``OTEL_SDK_DISABLED``, or set on purpose).
_SILENT_TRACER_PROVIDERS = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)


def _tracing() -> bool:
    """Whether spans go anywhere: asked for each span, so that a provider the host installs
    later is used from then on."""
    return not isinstance(trace.get_tracer_provider(), _SILENT_TRACER_PROVIDERS)


#: Only the W3C trace context is stored with a row, never the baggage: what a project puts
#: in its baggage may be personal data, and a row outlives the request by days.
_W3C = TraceContextTextMapPropagator()


def current_trace_context() -> dict[str, str] | None:
    """Return the current span's W3C trace context, to be stored with a row written for later.

    A dict of the ``traceparent`` header and, when the span has one, ``tracestate``, as
    OpenTelemetry's propagation API writes them; ``None`` when no tracer provider is
    installed or no valid span is current (nothing to link to).
    """
    if not _tracing() or not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    _W3C.inject(carrier)
    return carrier or None


@contextmanager
def continued(carried: object) -> Iterator[None]:
    """Run the block in the trace context ``carried`` from another process (a dict as
    :func:`current_trace_context` returns), as a task continues the trace that enqueued it.

    Nothing changes when nothing traces, when ``carried`` names no span, or when a valid
    span is current already (an instrumentation, such as Celery's, started the task's own
    span from the message: it is the better parent).
    """
    span_context = trace_context_of(carried) if _tracing() else None
    if span_context is None or trace.get_current_span().get_span_context().is_valid:
        yield
        return
    token = otel_context.attach(trace.set_span_in_context(NonRecordingSpan(span_context)))
    try:
        yield
    finally:
        otel_context.detach(token)


def trace_context_of(stored: object) -> SpanContext | None:
    """Return the span context a stored trace context names, or ``None`` for none.

    ``None``, an empty or malformed value (a column edited by hand) all mean none: a row
    is delivered whatever its trace context says.
    """
    if not isinstance(stored, Mapping) or not stored:
        return None
    carrier = {str(k): v for k, v in stored.items() if isinstance(v, str)}
    span_context = trace.get_current_span(_W3C.extract(carrier)).get_span_context()
    return span_context if span_context.is_valid else None


def count(instrument: str, saga_type: str, amount: int = 1) -> None:
    """Add ``amount`` to the counter ``bsft.saga.<instrument>`` for ``saga_type``.

    ``instrument`` is a key of :data:`COUNTERS`, e.g. ``count("timeout.fired",
    "quotes.follow-up")``; anything else is a ``ValueError``, as is a negative ``amount``
    (counters only go up); an ``amount`` of 0 records nothing. Counting is in-process and
    not transactional: call it after the work it counts has committed.
    """
    counter = _counter(instrument)
    if amount < 0:
        raise ValueError(f"A counter only goes up; got amount={amount} for {instrument!r}.")
    if amount:
        counter.add(amount, {ATTR_SAGA_TYPE: saga_type})


def count_ignored(saga_type: str, reason: str) -> None:
    """Count one event that ``saga_type`` knows but none of its instances took.

    ``reason``: ``"no_instance"`` (nothing to advance and not a start event),
    ``"not_awaited"`` (the current step awaits something else), ``"duplicate"`` (the
    instance already handled that message id), ``"timer_never_starts"`` (a timer's event
    for a start step: it starts no saga) or ``"kept_limit"`` (an early event its saga had no
    room to keep: ``ENGINE.MAX_KEPT_EVENTS_PER_SAGA``).
    """
    if reason not in IGNORED_REASONS:
        raise ValueError(f"Unknown reason {reason!r}; expected one of {IGNORED_REASONS}.")
    _counter("event.ignored").add(1, {ATTR_SAGA_TYPE: saga_type, ATTR_REASON: reason})


def _span_attributes(attributes: dict[str, str | int]) -> Attributes:
    correlation_id = get_correlation_id()
    if correlation_id is not None:
        attributes[ATTR_CORRELATION_ID] = correlation_id
    return attributes


@contextmanager
def step_span(
    saga_type: str,
    *,
    step_index: int,
    event_type: str,
) -> Iterator[Span]:
    """Run the block as one saga step: a ``saga.step`` span plus a duration measurement.

    The span carries ``saga.type``, ``saga.step.index`` and ``saga.event.type``. On exit the
    elapsed time (``time.perf_counter``, in seconds) is recorded into
    ``bsft.saga.step.duration`` with ``saga.type``, whether the block succeeded or raised.
    An exception is recorded on the span, which gets an error status, and is re-raised.
    """
    started = time.perf_counter()
    try:
        if not _tracing():
            yield INVALID_SPAN
            return
        attributes = _span_attributes(
            {
                ATTR_SAGA_TYPE: saga_type,
                ATTR_STEP_INDEX: step_index,
                ATTR_EVENT_TYPE: event_type,
            }
        )
        with _span("saga.step", attributes) as span:
            yield span
    finally:
        _step_duration().record(time.perf_counter() - started, {ATTR_SAGA_TYPE: saga_type})


@contextmanager
def timer_span(saga_type: str, timer_name: str, *, trace_context: object = None) -> Iterator[Span]:
    """Run the block (firing one timer) inside a ``saga.timeout`` span.

    The span carries ``saga.type`` and ``saga.timeout.name``; an exception is recorded on
    it, which gets an error status, and is re-raised. ``trace_context``: the one stored
    with the timer, which the span links to, or takes as its parent (see
    :func:`deliver_span`).
    """
    if not _tracing():
        yield INVALID_SPAN
        return
    attributes = _span_attributes({ATTR_SAGA_TYPE: saga_type, ATTR_TIMEOUT_NAME: timer_name})
    with _span("saga.timeout", attributes, trace_context) as span:
        yield span


@contextmanager
def deliver_span(
    saga_type: str, event_type: str, *, trace_context: object = None
) -> Iterator[Span]:
    """Run the block (delivering one outbox row) inside a ``saga.deliver`` span.

    The span carries ``saga.type`` (``""`` for a row of no saga) and ``saga.event.type``.
    With a stored ``trace_context`` (the one of the code that wrote the row) the span is a
    child of what is current in the delivering pass and links to the stored context; under
    ``TELEMETRY.TRACE_PARENT = "stored"`` the stored context is its parent instead, and the
    pass's span (if any) is linked. An exception is recorded and re-raised.
    """
    with _row_span("saga.deliver", saga_type, event_type, trace_context) as span:
        yield span


@contextmanager
def apply_span(saga_type: str, event_type: str, *, trace_context: object = None) -> Iterator[Span]:
    """Run the block (applying one kept event to its saga) inside a ``saga.apply`` span,
    linked to the trace that kept the event (or its child) as :func:`deliver_span` is."""
    with _row_span("saga.apply", saga_type, event_type, trace_context) as span:
        yield span


@contextmanager
def _row_span(name: str, saga_type: str, event_type: str, stored: object) -> Iterator[Span]:
    if not _tracing():
        yield INVALID_SPAN
        return
    attributes = _span_attributes({ATTR_SAGA_TYPE: saga_type, ATTR_EVENT_TYPE: event_type})
    with _span(name, attributes, stored) as span:
        yield span


def _parent_and_links(stored: object) -> tuple[otel_context.Context | None, list[Link]]:
    """The parent context (``None``: the current one) and the links of a delivery span."""
    written_by = trace_context_of(stored)
    if written_by is None:
        return None, []
    if saga_settings.telemetry.trace_parent == "stored":
        current = trace.get_current_span().get_span_context()
        parent = trace.set_span_in_context(NonRecordingSpan(written_by))
        return parent, [Link(current)] if current.is_valid else []
    return None, [Link(written_by)]


@contextmanager
def _span(name: str, attributes: Attributes, stored: object = None) -> Iterator[Span]:
    parent, links = _parent_and_links(stored)
    # The SDK's own recording calls str() on the exception; one whose __str__ raises would
    # then replace the exception the caller must see (and count as the row's failure).
    with _tracer().start_as_current_span(
        name,
        context=parent,
        links=links,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except BaseException as exc:
            _record_error(span, exc)
            raise


def _record_error(span: Span, exc: BaseException) -> None:
    try:
        description = f"{type(exc).__name__}: {exc}"
    except Exception:
        description = type(exc).__name__
    span.set_status(Status(StatusCode.ERROR, description))
    try:
        span.record_exception(exc)
    except Exception:
        span.add_event("exception", {"exception.type": type(exc).__name__})
