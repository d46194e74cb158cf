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
``bsft.saga.timeout.lag``                 gauge      seconds the oldest due timer or undelivered
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
``saga.type``, ``saga.step.index``, ``saga.event.type``) and ``saga.timeout`` (``saga.type``,
``saga.timeout.name``); both add ``saga.correlation_id`` when an ambient correlation id is set.

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

from opentelemetry import metrics, trace
from opentelemetry.metrics import CallbackOptions, Counter, Histogram, Meter, Observation
from opentelemetry.trace import INVALID_SPAN, Span, Status, StatusCode, Tracer
from opentelemetry.util.types import Attributes

from bsft_saga import __version__
from bsft_saga.correlation import get_correlation_id

__all__ = [
    "COUNTERS",
    "GAUGES",
    "METER_NAME",
    "STEP_DURATION",
    "TRACER_NAME",
    "count",
    "count_ignored",
    "install_gauges",
    "step_span",
    "timer_span",
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
            "How late the oldest due timer or undelivered outbox row is; 0 when none is.",
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
def step_span(saga_type: str, *, step_index: int, event_type: str) -> Iterator[Span]:
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
            {ATTR_SAGA_TYPE: saga_type, ATTR_STEP_INDEX: step_index, ATTR_EVENT_TYPE: event_type}
        )
        with _span("saga.step", attributes) as span:
            yield span
    finally:
        _step_duration().record(time.perf_counter() - started, {ATTR_SAGA_TYPE: saga_type})


@contextmanager
def timer_span(saga_type: str, timer_name: str) -> Iterator[Span]:
    """Run the block (firing one timer) inside a ``saga.timeout`` span.

    The span carries ``saga.type`` and ``saga.timeout.name``; an exception is recorded on
    it, which gets an error status, and is re-raised.
    """
    if not _tracing():
        yield INVALID_SPAN
        return
    attributes = _span_attributes({ATTR_SAGA_TYPE: saga_type, ATTR_TIMEOUT_NAME: timer_name})
    with _span("saga.timeout", attributes) as span:
        yield span


@contextmanager
def _span(name: str, attributes: Attributes) -> Iterator[Span]:
    # The SDK's own recording calls str() on the exception; one whose __str__ raises would
    # then replace the exception the caller must see (and count as the row's failure).
    with _tracer().start_as_current_span(
        name, attributes=attributes, record_exception=False, set_status_on_exception=False
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
