"""The kept events a pass applies are found through the partial index of ready rows, not a
scan of every kept row (most of which wait for a later step)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, transaction

from bsft_saga import kept, publish
from bsft_saga.models import SagaInstance, SagaKeptEvent
from tests.support.services import require_postgres_backend
from tests.support.timer_fixtures import T0
from tests.testapp.kept_events import Opened


def _plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan, *(node for child in plan.get("Plans", []) for node in _plan_nodes(child))]


@pytest.mark.postgres
@pytest.mark.django_db
def test_the_left_over_lookup_reads_the_ready_index_beside_many_waiting_rows() -> None:
    require_postgres_backend()
    publish(Opened("many"))
    saga = SagaInstance.objects.get(correlation_key="many")
    table = SagaKeptEvent._meta.db_table
    with connection.cursor() as cursor:
        # 40,000 kept events waiting for a later step, and 20 ready ones.
        cursor.execute(
            f"""
            INSERT INTO {table} (saga_id, saga_type, correlation_key, step_index, event_type,
                payload, message_id, correlation_id, kept_at, next_attempt_at, attempts,
                last_error)
            SELECT %s, %s, 'many', 2, 'tests.kept.item', '{{"key": "many"}}',
                gen_random_uuid(), '', %s, CASE WHEN g <= 20 THEN %s END, 0, ''
            FROM generate_series(1, 40000) AS g
            """,
            [saga.pk, saga.saga_type, T0, T0],
        )
        cursor.execute(f"ANALYZE {table}")
    ready = (
        SagaKeptEvent.objects.claimable(T0)
        .filter(saga__is_complete=False)
        .values_list("saga_id", "saga__saga_type", "saga__flow_version")[:400]
    )
    sql, params = ready.query.sql_with_params()

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
        plan = cursor.fetchone()[0][0]["Plan"]
    nodes = _plan_nodes(plan)
    scans = {
        (node["Node Type"], node.get("Index Name"))
        for node in nodes
        if node.get("Relation Name") == table
    }
    assert scans == {("Index Scan", "bsft_saga_kept_ready_idx")}, nodes
    assert [s[0] for s in kept.ready_sagas(100, now=T0)] == [saga.pk]
