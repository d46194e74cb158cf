"""The observable gauges ``bsft.saga.timeout.lag``, ``.timeout.due`` and ``.dead_letters``,
read through the OpenTelemetry SDK's in-memory reader, as a host's exporter would."""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from freezegun import freeze_time
from opentelemetry.sdk.metrics.export import NumberDataPoint

from bsft_saga.models import SagaOutboxMessage, TimeoutOutcome
from bsft_saga.telemetry import GAUGES
from tests.support import telemetry as telemetry_fixtures
from tests.support.telemetry import Telemetry
from tests.testapp.ops_flows import make_saga, make_timer

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
LAG, DUE, DEAD = "bsft.saga.timeout.lag", "bsft.saga.timeout.due", "bsft.saga.dead_letters"


@pytest.fixture(scope="session")
def otel() -> Telemetry:
    return telemetry_fixtures.install()


def gauge(otel: Telemetry, name: str) -> NumberDataPoint:
    """The one data point of gauge ``name`` in a fresh collection."""
    [point] = otel.points(name)
    assert isinstance(point, NumberDataPoint)
    return point


def _dead_outbox_row() -> None:
    SagaOutboxMessage.objects.create(
        id=uuid.uuid4(),
        event_type="tests.ops.noted",
        payload={"note": ""},
        created_at=NOW - timedelta(days=1),
        attempts=10,
        dead_lettered_at=NOW - timedelta(hours=1),
    )


@pytest.mark.django_db
def test_each_gauge_is_one_point_without_attributes_read_at_collection(otel: Telemetry) -> None:
    saga = make_saga("gauges", now=NOW - timedelta(hours=1))
    make_timer(saga, "late", due_at=NOW - timedelta(seconds=42))
    make_timer(saga, "also-late", due_at=NOW - timedelta(seconds=5))
    make_timer(saga, "later", due_at=NOW + timedelta(hours=1))
    make_timer(saga, "dead", outcome=TimeoutOutcome.DEAD_LETTERED)
    _dead_outbox_row()

    with freeze_time(NOW):
        points = {name: gauge(otel, name) for name in (LAG, DUE, DEAD)}

    assert {name: point.value for name, point in points.items()} == {LAG: 42.0, DUE: 2, DEAD: 2}
    assert all(not point.attributes for point in points.values())


@pytest.mark.django_db
def test_the_gauges_follow_the_rows_from_one_collection_to_the_next(otel: Telemetry) -> None:
    with freeze_time(NOW):
        assert (gauge(otel, LAG).value, gauge(otel, DUE).value) == (0, 0)
        make_timer(make_saga("later"), due_at=NOW - timedelta(seconds=7))

        assert (gauge(otel, LAG).value, gauge(otel, DUE).value) == (7.0, 1)


@pytest.mark.django_db
def test_a_collection_runs_the_same_few_queries_however_many_rows(otel: Telemetry) -> None:
    make_timer(make_saga("one"), due_at=NOW - timedelta(seconds=1))
    with CaptureQueriesContext(connection) as few:
        otel.metric_reader.get_metrics_data()
    for n in range(25):
        saga = make_saga(f"many-{n}")
        make_timer(saga, due_at=NOW - timedelta(seconds=n))
        make_timer(saga, "dead", outcome=TimeoutOutcome.DEAD_LETTERED)

    with CaptureQueriesContext(connection) as many:
        otel.metric_reader.get_metrics_data()

    assert len(many) == len(few) == 6  # lag 2, due 1, dead letters 3


@pytest.mark.django_db
def test_the_gauges_reach_the_exporter_with_their_documented_units(otel: Telemetry) -> None:
    assert set(GAUGES) == {LAG, DUE, DEAD}
    assert {name: otel.metric_unit(name) for name in GAUGES} == {
        LAG: "s",
        DUE: "{timer}",
        DEAD: "{row}",
    }


def test_a_database_that_cannot_answer_leaves_the_gauges_out_and_logs_why(
    otel: Telemetry, caplog: pytest.LogCaptureFixture
) -> None:
    # Outside django_db, pytest-django refuses every query, as a database that is down would.
    with caplog.at_level(logging.WARNING, logger="bsft_saga.telemetry"):
        names = otel.metric_names()

    assert not names & {LAG, DUE, DEAD}
    messages = [record.getMessage() for record in caplog.records]
    for name in (LAG, DUE, DEAD):
        assert any(f"gauge {name} not observed" in message for message in messages), messages
