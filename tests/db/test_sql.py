"""bsft_saga.db.sql's INSERTs: what they leave to the database, and what the driver caches."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
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


def test_values_shared_by_neighbouring_rows_are_bound_to_each_of_them() -> None:
    # Rows of a group share value objects (a payload, a moment); each column is prepared
    # once per run of one object, and every row still gets its own value back.
    publish(BenchReminderRequested("k-1"))
    saga = SagaInstance.objects.get(correlation_key="k-1")
    timer = SagaTimeout.objects.get(saga=saga)
    shared, other = {"which": "shared"}, {"which": "other"}
    later = timer.due_at + timedelta(hours=1)
    payloads = [shared, shared, other, shared, {"which": "shared"}]
    moments = [timer.due_at, later, later, timer.due_at, later]
    rows = [
        {
            "saga": saga.pk,
            "name": f"t{n}",
            "due_at": moment,
            "event_type": "x.y",
            "scheduled_step_index": 1,
            "scheduled_at": timer.scheduled_at,
            "correlation_id": "c",
            "payload": payload,
        }
        for n, (payload, moment) in enumerate(zip(payloads, moments, strict=True))
    ]

    sql.insert(SagaTimeout, rows)

    written = SagaTimeout.objects.filter(saga=saga, name__startswith="t").order_by("name")
    assert [(t.payload, t.due_at) for t in written] == list(zip(payloads, moments, strict=True))


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


def test_arrays_are_bound_apart_from_the_statement_whose_text_stays_the_same_for_any_rows() -> None:
    # Written into the statement's text (Django's client-side binding), every element is
    # quoted in Python and parsed by the server: the text grows with the rows.
    require_postgres_backend()
    from django.test.utils import CaptureQueriesContext

    for key in ("k-a", "k-b", "k-c"):
        publish(BenchReminderRequested(key))
    few = list(SagaTimeout.objects.values_list("pk", flat=True))[:1]
    every = list(SagaTimeout.objects.values_list("pk", flat=True))
    logged = []
    for pks in (few, every):
        with CaptureQueriesContext(connection) as queries:
            matched = sql.update_each(SagaTimeout, {"attempts": 1}, {}, pks)
        assert matched == set(pks)
        (statement,) = [query["sql"] for query in queries.captured_queries]
        logged.append(statement)
    assert logged[0] == logged[1]
    assert set(SagaTimeout.objects.values_list("attempts", flat=True)) == {1}


def test_arrays_are_bound_as_text_where_django_binds_on_the_server_and_logs_queries() -> None:
    # Django renders a logged statement with a client-side cursor, which refuses binary
    # parameters; with OPTIONS["server_side_binding"] the arrays go as text instead.
    require_postgres_backend()
    from django.db.backends.postgresql.base import DatabaseWrapper

    settings = connection.settings_dict
    options = {**settings["OPTIONS"], "server_side_binding": True}
    server_side = DatabaseWrapper({**settings, "OPTIONS": options}, alias="server_side")
    server_side.force_debug_cursor = True
    try:
        for logged in (True, False):
            server_side.force_debug_cursor = logged
            counted = sql._returned_keys(
                server_side,
                f"SELECT count(*) FROM unnest(CAST({sql._ARRAY} AS integer[]))",
                [[1, 2, 3]],
            )
            assert counted == {3}
        assert len(server_side.queries) == 1  # the logged one, rendered
    finally:
        server_side.close()


class _Text(str):
    pass


def _bound_by_the_orm(field: Any, value: Any, *, where: bool) -> Any:
    if where:  # a value the column is compared with
        return field.get_db_prep_value(value, connection, prepared=False)
    return field.get_db_prep_save(value, connection)


def test_array_statements_bind_every_value_of_every_column_as_the_orm_would() -> None:
    # The array statements pass the values Django binds unchanged (UUIDs, strings, aware
    # datetimes, booleans) straight through: for every column of the saga tables, and
    # values of each kind and of kinds next to them, what they bind is what the ORM binds.
    require_postgres_backend()
    import uuid
    import warnings
    from datetime import UTC, datetime

    from django.apps import apps
    from django.utils.functional import lazystr

    moment = datetime(2026, 12, 8, 9, 30, tzinfo=UTC)
    values: list[Any] = [None, uuid.uuid4(), "text", "", _Text("sub"), lazystr("lazy"), moment]
    values += [moment.replace(tzinfo=None), True, False, 7, {"a": [1]}, [1, 2]]
    passed_through = 0
    for model in apps.get_app_config("bsft_saga").get_models():
        for field in model._meta.concrete_fields:
            for where in (False, True):
                array = sql._array_prep(field, where=where)
                for value in values:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")  # a naive datetime's
                        try:
                            expected = _bound_by_the_orm(field, value, where=where)
                        except Exception:  # a value the field refuses is not compared
                            continue
                        bound = array(value, connection)
                    where_ = f"{model.__name__}.{field.name} ({'where' if where else 'save'})"
                    assert type(bound) is type(expected), f"{where_}: {value!r}"
                    assert repr(bound) == repr(expected), f"{where_}: {value!r}"
                    passed_through += bound is value and value is not None
    assert passed_through > 100  # the shortcut is taken (it is the point)


def test_among_finds_the_rows_whose_column_holds_one_of_the_values_on_every_backend() -> None:
    from django.test.utils import CaptureQueriesContext

    for key in ("k-a", "k-b", "k-c"):
        publish(BenchReminderRequested(key))
    table = connection.ops.quote_name(SagaInstance._meta.db_table)
    column = connection.ops.quote_name("correlation_key")
    statements = []
    for keys in ([], ["k-b"], ["k-a", "k-c", "k-unknown"]):
        condition, params = sql.among(column, SagaInstance, "correlation_key", keys)
        with CaptureQueriesContext(connection) as queries:
            rows = sql.select(
                f"SELECT {column} FROM {table} WHERE {condition}",
                params,
                [(SagaInstance, "correlation_key")],
            )
        assert sorted(row[0] for row in rows) == sorted(set(keys) - {"k-unknown"})
        statements.append(queries.captured_queries[0]["sql"])
    if connection.vendor == "postgresql":  # one array, whatever the number of values
        assert statements[1] == statements[2]
