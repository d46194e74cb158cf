"""The rows kept per saga (inbox, journal, kept events) are found by saga down one index
each, whose first column is the saga: the unique (saga, message id) constraints and the
journal's (saga, at, id) index. No second index of the saga column alone is written beside
it with every handled event and every fired timer.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, models, transaction

from bsft_saga.models import SagaInboxEntry, SagaJournalEntry, SagaKeptEvent
from tests.support.services import require_postgres_backend
from tests.testapp.ops_flows import make_saga

PER_SAGA = (SagaInboxEntry, SagaJournalEntry, SagaKeptEvent)


def _indexes_led_by(model: type[models.Model], column: str) -> dict[str, list[str]]:
    """The indexes (unique constraints included) of ``model`` whose first column is
    ``column``: name -> columns."""
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, model._meta.db_table)
    return {
        name: details["columns"]
        for name, details in constraints.items()
        if (details["index"] or details["unique"])
        and not details["primary_key"]
        and details["columns"][:1] == [column]
    }


@pytest.mark.django_db
@pytest.mark.parametrize("model", PER_SAGA, ids=lambda model: model.__name__)
def test_one_index_serves_the_lookups_by_saga(model: type[models.Model]) -> None:
    led = _indexes_led_by(model, "saga_id")
    assert led, f"{model.__name__}: no index leads with saga_id"
    assert all(len(columns) > 1 for columns in led.values()), (
        f"{model.__name__}: an index of saga_id alone beside {led}"
    )


def _index_scans(sql: str, params: Any) -> set[str]:
    with transaction.atomic(), connection.cursor() as cursor:
        # Asked with sequential scans priced out: which index, if any, can serve it.
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
        plan = cursor.fetchone()[0][0]["Plan"]
    nodes, found = [plan], set()
    while nodes:
        node = nodes.pop()
        nodes.extend(node.get("Plans", []))
        if "Index Name" in node:
            found.add(node["Index Name"])
    return found


@pytest.mark.postgres
@pytest.mark.django_db
@pytest.mark.parametrize("model", PER_SAGA, ids=lambda model: model.__name__)
def test_a_sagas_rows_are_read_down_an_index(model: type[models.Model]) -> None:
    require_postgres_backend()
    saga = make_saga()
    rows = model._default_manager.filter(saga=saga)
    if model is SagaJournalEntry:
        rows = rows.order_by("-at", "-id")  # the saga page's journal
    sql, params = rows.query.sql_with_params()
    assert set(_indexes_led_by(model, "saga_id")) & _index_scans(sql, params)
