"""bsft_saga.db.sql's INSERTs: what they leave to the database, and what the driver caches."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from bsft_saga import publish
from bsft_saga.db import sql
from bsft_saga.models import SagaInstance, SagaTimeout
from tests.support.services import require_postgres_backend
from tests.testapp.load_events import BenchReminderRequested

pytestmark = pytest.mark.django_db(transaction=True)


def test_columns_the_rows_leave_out_get_the_fields_defaults_null_ones_included() -> None:
    publish(BenchReminderRequested("k-1"))
    saga = SagaInstance.objects.get(correlation_key="k-1")
    timer = SagaTimeout.objects.get(saga=saga)
    row = {"saga": saga.pk, "name": "second", "due_at": timer.due_at, "event_type": "x.y"}
    row.update(scheduled_step_index=1, scheduled_at=timer.scheduled_at, correlation_id="c")
    row["payload"] = {}
    # The second row names a nullable column the first leaves out: its value is kept.
    second = {**row, "name": "third", "next_attempt_at": timer.due_at}

    sql.insert(SagaTimeout, [row, second])

    left_out = SagaTimeout.objects.get(saga=saga, name="second")
    assert (left_out.dispatched_at, left_out.claim_token, left_out.trace_context) == (
        None,
        None,
        None,
    )
    assert left_out.attempts == 0  # a default that is not NULL is still bound
    assert SagaTimeout.objects.get(saga=saga, name="third").next_attempt_at == timer.due_at


def test_a_sagas_creation_binds_few_enough_parameters_for_psycopg_to_cache_its_parsing() -> None:
    # psycopg parses a statement with more than MAX_CACHED_STATEMENT_PARAMS parameters again
    # on every execution; a start event's instance, inbox, timer and journal rows are one
    # statement on PostgreSQL, written for every saga started.
    require_postgres_backend()
    from psycopg._queries import MAX_CACHED_STATEMENT_PARAMS

    executed: list[tuple[str, Any]] = []

    def record(execute: Callable[..., Any], statement: str, params: Any, *args: Any) -> Any:
        executed.append((statement, params))
        return execute(statement, params, *args)

    with connection.execute_wrapper(record):
        publish(BenchReminderRequested("k-2"))

    (creation,) = [params for statement, params in executed if "INSERT" in statement]
    assert len(creation) <= MAX_CACHED_STATEMENT_PARAMS
