"""The migrations create what the models declare, on every backend: ``makemigrations``
finds nothing to write, and the conditional unique constraints are in the database (on
MariaDB and MySQL as the unique indexes over a generated flag column of migration 0003)."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection

#: The generated column that stands for each constraint's condition on MariaDB and MySQL.
MYSQL_FLAGS = {
    "bsft_saga_one_pending_timeout_name": "pending_flag",
    "bsft_saga_one_active_instance_per_key": "active_flag",
}


@pytest.mark.django_db
def test_models_and_migrations_are_in_sync() -> None:
    out = StringIO()
    call_command("makemigrations", "bsft_saga", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()


def _unique_columns(table: str, name: str) -> list[str]:
    with connection.cursor() as cursor:
        constraint = connection.introspection.get_constraints(cursor, table)[name]
    assert constraint["unique"]
    columns: list[str] = constraint["columns"]
    if connection.vendor == "mysql":
        assert columns[0] == MYSQL_FLAGS[name]
        return columns[1:]
    return columns


@pytest.mark.django_db
def test_pending_timer_names_are_unique_through_a_partial_constraint() -> None:
    columns = _unique_columns("bsft_saga_sagatimeout", "bsft_saga_one_pending_timeout_name")

    assert columns == ["saga_id", "name"]


@pytest.mark.django_db
def test_one_active_instance_per_key_is_a_partial_constraint() -> None:
    columns = _unique_columns("bsft_saga_sagainstance", "bsft_saga_one_active_instance_per_key")

    assert columns == ["saga_type", "correlation_key"]
