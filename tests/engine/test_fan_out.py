"""Fan-out: what one step may ask for, and what its writes cost in memory.

A step may schedule at most ``ENGINE.MAX_TIMERS_PER_STEP`` timers and publish at most
``ENGINE.MAX_EVENTS_PER_STEP`` events (1,000 each by default); up to that, both backends
write them (SQLite once failed with "too many SQL variables" on a start step of a few
hundred timers), and the next one is a ``ValueError`` that leaves nothing behind. The
multi-row INSERTs behind them are built for a few row counts only, so the cached SQL stays
small whatever the fan-out (it was cached per row count, without bound).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from bsft_saga import clock, publish
from bsft_saga.db import sql
from bsft_saga.models import SagaAuditRecord, SagaInstance, SagaOutboxMessage, SagaTimeout
from tests.testapp.timer_events import ProbeDue, ProbePoked, ProbeStarted
from tests.testapp.timer_flows import ProbeFlow, timers_of

pytestmark = pytest.mark.django_db

LIMIT = 1000


def schedule(count: int) -> Callable[[Any, Any], None]:
    def body(ctx: Any, e: Any) -> None:
        for n in range(count):
            ctx.schedule_timeout(f"t{n}", timedelta(hours=1 + n), ProbeDue(e.probe_id, str(n)))

    return body


def publish_events(count: int) -> Callable[[Any, Any], None]:
    def body(ctx: Any, e: Any) -> None:
        for n in range(count):
            ctx.publish(ProbeDue(e.probe_id, str(n)))

    return body


@pytest.mark.parametrize("step", ["start step", "later step"])
def test_a_step_schedules_up_to_the_limit_of_timers(action: Callable[..., str], step: str) -> None:
    body = action(schedule(LIMIT))
    if step == "start step":  # a new instance: its timers go in with it
        publish(ProbeStarted("fan", body))
    else:
        publish(ProbeStarted("fan"))
        publish(ProbePoked("fan", body))

    timers = timers_of(ProbeFlow, "fan")
    assert len(timers) == LIMIT
    assert {timer.name for timer in timers} == {f"t{n}" for n in range(LIMIT)}


@pytest.mark.parametrize("step", ["start step", "later step"])
def test_the_timer_beyond_the_limit_is_a_value_error_and_the_step_leaves_nothing(
    action: Callable[..., str], step: str
) -> None:
    body = action(schedule(LIMIT + 1))
    if step == "later step":
        publish(ProbeStarted("fan"))
    before = (
        SagaInstance.objects.get(saga_type=ProbeFlow.saga_type) if step == "later step" else None
    )

    with pytest.raises(ValueError, match=r"schedule_timeout\('t1000'\): a step schedules at most"):
        publish((ProbeStarted if step == "start step" else ProbePoked)("fan", body))

    assert not SagaTimeout.objects.exists()
    after = SagaInstance.objects.filter(saga_type=ProbeFlow.saga_type).first()
    assert (after.version if after else None) == (before.version if before else None)


@pytest.mark.parametrize("step", ["start step", "later step"])
def test_a_step_publishes_up_to_the_limit_of_events(action: Callable[..., str], step: str) -> None:
    body = action(publish_events(LIMIT))
    if step == "start step":
        publish(ProbeStarted("fan", body))
    else:
        publish(ProbeStarted("fan"))
        publish(ProbePoked("fan", body))

    # Not delivered yet: the test's transaction has not committed.
    assert SagaOutboxMessage.objects.filter(event_type="tests.timers.probe-due").count() == LIMIT


def test_the_event_beyond_the_limit_is_a_value_error_and_the_step_leaves_nothing(
    action: Callable[..., str],
) -> None:
    with pytest.raises(ValueError, match=r"ctx\.publish\(tests\.timers\.probe-due\): a step"):
        publish(ProbeStarted("fan", action(publish_events(LIMIT + 1))))

    assert not SagaOutboxMessage.objects.exists()
    assert not SagaInstance.objects.exists()


def test_the_limits_are_settings(action: Callable[..., str]) -> None:
    with override_settings(
        BSFT_SAGA={"ENGINE": {"MAX_TIMERS_PER_STEP": 2, "MAX_EVENTS_PER_STEP": 3}}
    ):
        publish(
            ProbeStarted(
                "ok", action(lambda ctx, e: (schedule(2)(ctx, e), publish_events(3)(ctx, e)))
            )
        )
        with pytest.raises(ValueError, match="at most 2 timers"):
            publish(ProbeStarted("timers", action(schedule(3))))
        with pytest.raises(ValueError, match="at most 3 events"):
            publish(ProbeStarted("events", action(publish_events(4))))

    assert len(timers_of(ProbeFlow, "ok")) == 2


def _audit_rows(count: int, tag: str) -> list[dict[str, Any]]:
    now = clock.now()
    return [
        {"action": tag, "saga_type": "tests.fan-out", "correlation_key": str(n), "recorded_at": now}
        for n in range(count)
    ]


def test_multi_row_inserts_are_cached_for_a_few_row_counts_whatever_the_fan_out() -> None:
    sql._insert_sql.cache_clear()
    counts = [*range(1, 120), 499, 500, 501, 777, 1234, 2000]

    for count in counts:
        sql.insert(SagaAuditRecord, _audit_rows(count, f"fan-{count}"))

    assert SagaAuditRecord.objects.count() == sum(counts)
    assert [
        SagaAuditRecord.objects.filter(action=f"fan-{count}").count() for count in counts
    ] == counts
    # The chunk sizes, and each count below the smallest one.
    assert sql._insert_sql.cache_info().currsize <= len(sql.CHUNK_SIZES) + min(sql.CHUNK_SIZES) - 1


def test_a_large_insert_is_split_into_statements_within_the_parameter_limit() -> None:
    # 30,000 rows of nine columns: more parameters than SQLite binds in one statement.
    rows = _audit_rows(30_000, "bulk")
    per_row = len(sql._insert_fields(SagaAuditRecord, tuple(rows[0])))

    with CaptureQueriesContext(connection) as captured:
        sql.insert(SagaAuditRecord, rows)

    assert SagaAuditRecord.objects.filter(action="bulk").count() == 30_000
    inserts = [q["sql"] for q in captured.captured_queries if q["sql"].startswith("INSERT")]
    if connection.vendor == "postgresql":
        # One statement binding an array per column, whatever the number of rows.
        (insert,) = inserts
        assert "unnest" in insert
        return
    rows_per_statement = [statement.count("), (") + 1 for statement in inserts]
    assert sum(rows_per_statement) == 30_000
    assert max(rows_per_statement) <= max(sql.CHUNK_SIZES)
    limit = connection.features.max_query_params or 65_535
    assert max(rows_per_statement) * per_row <= limit
