"""``SagaContextFilter``: log records name the correlation id and the saga of the work they
were written in (docs/observability.md, "Logs that name their saga")."""

from __future__ import annotations

import logging
import textwrap
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from freezegun.api import FrozenDateTimeFactory

from bsft_saga import publish
from bsft_saga.correlation import SagaInScope, correlation_scope, saga_scope
from bsft_saga.models import SagaInstance
from bsft_saga.outbox import deliver_pending
from bsft_saga.signals import event_published
from bsft_saga.timeouts import drain_due
from tests.support.examples import docs_examples, run_python
from tests.support.logs import Collected
from tests.support.receivers import receiving
from tests.testapp.timer_events import ProbeDue, ProbePoked, ProbeStarted

Register = Callable[[Callable[[Any, Any], None]], str]

log = logging.getLogger("tests.logging")


@contextmanager
def collected() -> Iterator[list[logging.LogRecord]]:
    """The records of ``tests.logging`` inside the block, through the filter."""
    handler = Collected()
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    try:
        yield handler.records
    finally:
        log.removeHandler(handler)


@contextmanager
def logging_on(event_cls: type, message: str) -> Iterator[None]:
    """A plain receiver of ``event_cls`` that logs ``message`` inside the block."""

    def on_event(sender: type, **kwargs: Any) -> None:
        log.info(message)

    event_published.connect(on_event, sender=event_cls, weak=False)
    try:
        yield
    finally:
        event_published.disconnect(on_event, sender=event_cls)


def _context(record: logging.LogRecord) -> tuple[str, ...]:
    return tuple(
        getattr(record, name) for name in ("correlation_id", "saga_type", "saga_key", "saga_id")
    )


def test_outside_any_scope_every_attribute_is_a_dash() -> None:
    with collected() as records:
        log.info("nothing in scope")

    assert _context(records[0]) == ("-", "-", "-", "-")


def test_inside_a_saga_scope_the_record_names_the_saga() -> None:
    saga_id = uuid.uuid4()
    with (
        collected() as records,
        correlation_scope("order-1"),
        saga_scope(SagaInScope("orders", "o-1", saga_id)),
    ):
        log.info("in scope")

    assert _context(records[0]) == ("order-1", "orders", "o-1", str(saga_id))


@pytest.mark.django_db
def test_a_step_s_records_name_its_saga(action: Register) -> None:
    with collected() as records, correlation_scope("order-2"):
        publish(ProbeStarted("log-1", action(lambda ctx, e: log.info("in the step"))))

    saga = SagaInstance.objects.get(correlation_key="log-1")
    assert _context(records[0]) == ("order-2", saga.saga_type, "log-1", str(saga.pk))


@pytest.mark.django_db
def test_a_fired_timer_s_receivers_log_under_the_timer_s_id_and_saga(
    clock: FrozenDateTimeFactory, action: Register
) -> None:
    def schedule(ctx: Any, e: Any) -> None:
        ctx.schedule_timeout("remind", timedelta(days=2), ProbeDue(e.probe_id))

    with correlation_scope("order-3"):
        publish(ProbeStarted("log-2", action(schedule)))
    clock.tick(timedelta(days=2))

    with (
        receiving(ProbeDue) as received,
        logging_on(ProbeDue, "reminder sent"),
        collected() as records,
        correlation_scope("the-dispatcher"),
    ):
        drain_due()

    assert len(received) == 1
    saga = SagaInstance.objects.get(correlation_key="log-2")
    assert [_context(r) for r in records] == [("order-3", saga.saga_type, "log-2", str(saga.pk))]


@pytest.mark.django_db
def test_a_timer_woken_step_logs_under_the_timer_s_id(
    clock: FrozenDateTimeFactory, action: Register
) -> None:
    woken = action(lambda ctx, e: log.info("woken"))
    with correlation_scope("order-4"):
        publish(
            ProbeStarted(
                "log-3",
                action(
                    lambda ctx, e: ctx.schedule_timeout(
                        "wake", timedelta(days=2), ProbePoked(e.probe_id, action=woken)
                    )
                ),
            )
        )
    clock.tick(timedelta(days=2))

    with collected() as records, correlation_scope("the-dispatcher"):
        drain_due()

    assert [r.correlation_id for r in records] == ["order-4"]  # type: ignore[attr-defined]


@pytest.mark.django_db
def test_a_delayed_message_s_receivers_log_under_its_publisher_s_id(
    clock: FrozenDateTimeFactory,
) -> None:
    with correlation_scope("order-5"):
        publish(ProbeDue("log-4"), delay=timedelta(hours=1))
    clock.tick(timedelta(hours=1))

    with (
        logging_on(ProbeDue, "delivered"),
        collected() as records,
        correlation_scope("the-dispatcher"),
    ):
        deliver_pending()

    assert [_context(r) for r in records] == [("order-5", "-", "-", "-")]


@pytest.mark.django_db
def test_a_timer_s_failure_is_logged_under_the_timer_s_id_and_saga(
    clock: FrozenDateTimeFactory, action: Register
) -> None:
    def schedule(ctx: Any, e: Any) -> None:
        ctx.schedule_timeout("remind", timedelta(days=2), ProbeDue(e.probe_id))

    def refuse(sender: type, **kwargs: Any) -> None:
        raise RuntimeError("the mail server said no")

    with correlation_scope("order-6"):
        publish(ProbeStarted("log-5", action(schedule)))
    clock.tick(timedelta(days=2))

    handler = Collected()
    delivery_log = logging.getLogger("bsft_saga.delivery")
    delivery_log.addHandler(handler)
    event_published.connect(refuse, sender=ProbeDue, weak=False)
    try:
        with correlation_scope("the-dispatcher"):
            drain_due()
    finally:
        event_published.disconnect(refuse, sender=ProbeDue)
        delivery_log.removeHandler(handler)

    saga = SagaInstance.objects.get(correlation_key="log-5")
    failures = [r for r in handler.records if r.exc_info]
    assert [_context(r) for r in failures] == [("order-6", saga.saga_type, "log-5", str(saga.pk))]


# --- the LOGGING example in docs/observability.md ----------------------------------------

_LOG_IN_A_SAGA = """
import logging.config
import uuid

from bsft_saga.correlation import SagaInScope, correlation_scope, saga_scope

logging.config.dictConfig(LOGGING)
saga = SagaInScope("orders", "o-7", uuid.UUID(int=7))
with correlation_scope("order-7"), saga_scope(saga):
    logging.getLogger("shop").info("reminder sent")
"""


def test_the_logging_example_prints_the_saga_of_each_record() -> None:
    result = run_python(
        docs_examples("observability.md", "bsft_saga.logging.SagaContextFilter") + _LOG_IN_A_SAGA
    )

    assert result.returncode == 0, result.stderr
    assert "[order-7 orders o-7 00000000-0000-0000-0000-000000000007]" in result.stderr
    assert "shop: reminder sent" in result.stderr


def test_the_log_bridge_example_exports_the_saga_as_attributes() -> None:
    pytest.importorskip("opentelemetry.instrumentation.logging")
    examples = docs_examples(
        "observability.md", "bsft_saga.logging.SagaContextFilter", "set_logger_provider("
    )
    script = (
        examples
        + textwrap.dedent(
            """
            from opentelemetry.sdk._logs.export import (
                InMemoryLogRecordExporter,
                SimpleLogRecordProcessor,
            )

            exported = InMemoryLogRecordExporter()
            logger_provider.add_log_record_processor(SimpleLogRecordProcessor(exported))
            """
        )
        + _LOG_IN_A_SAGA
        + textwrap.dedent(
            """
            [record] = exported.get_finished_logs()
            attributes = record.log_record.attributes
            print(*(attributes[k] for k in ("correlation_id", "saga_type", "saga_key", "saga_id")))
            logger_provider.shutdown()
            """
        )
    )
    result = run_python(script)

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == (
        "order-7 orders o-7 00000000-0000-0000-0000-000000000007"
    )
