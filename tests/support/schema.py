"""The schema bsft_saga's migrations create, read back from the database.

Tables, columns (type, nullability, default), indexes with their definitions (partial
conditions and expressions included), constraints and foreign keys, in a form that does not
depend on the order in which migrations added them: two databases migrated differently
compare equal exactly when they hold the same schema.
"""

from __future__ import annotations

import re
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

TABLE_PREFIX = "bsft_saga_"


def schema_of(connection: BaseDatabaseWrapper) -> dict[str, Any]:
    """The schema of every ``bsft_saga_*`` table on ``connection``."""
    if connection.vendor == "postgresql":
        return _postgresql(connection)
    if connection.vendor == "sqlite":
        return _sqlite(connection)
    raise NotImplementedError(connection.vendor)


def _postgresql(connection: BaseDatabaseWrapper) -> dict[str, Any]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name, column_name, data_type, character_maximum_length, "
            "is_nullable, column_default FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name LIKE %s",
            [TABLE_PREFIX + "%"],
        )
        columns = cursor.fetchall()
        cursor.execute(
            "SELECT tablename, indexname, indexdef FROM pg_indexes "
            "WHERE schemaname = current_schema() AND tablename LIKE %s",
            [TABLE_PREFIX + "%"],
        )
        indexes = cursor.fetchall()
        cursor.execute(
            "SELECT rel.relname, con.conname, pg_get_constraintdef(con.oid) "
            "FROM pg_constraint con JOIN pg_class rel ON rel.oid = con.conrelid "
            "JOIN pg_namespace ns ON ns.oid = rel.relnamespace "
            "WHERE ns.nspname = current_schema() AND rel.relname LIKE %s",
            [TABLE_PREFIX + "%"],
        )
        constraints = cursor.fetchall()
    schema: dict[str, Any] = {}
    for table, column, data_type, length, nullable, default in columns:
        schema.setdefault(table, {"columns": {}, "indexes": {}, "constraints": {}})
        schema[table]["columns"][column] = [data_type, length, nullable, default]
    for table, name, definition in indexes:
        schema[table]["indexes"][_generic(name)] = _generic(definition)
    for table, name, definition in constraints:
        schema[table]["constraints"][_generic(name)] = _generic(definition)
    return _sorted(schema)


def _sqlite(connection: BaseDatabaseWrapper) -> dict[str, Any]:
    schema: dict[str, Any] = {}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE %s",
            [TABLE_PREFIX + "%"],
        )
        tables = [row[0] for row in cursor.fetchall()]
        for table in tables:
            cursor.execute(f'PRAGMA table_info("{table}")')
            columns = {
                name: [data_type, bool(notnull), default, pk]
                for _cid, name, data_type, notnull, default, pk in cursor.fetchall()
            }
            cursor.execute(f'PRAGMA foreign_key_list("{table}")')
            foreign_keys = sorted(f"{row[3]} -> {row[2]}({row[4]})" for row in cursor.fetchall())
            cursor.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = %s",
                [table],
            )
            indexes = {
                _generic(name): _generic(sql or "(automatic)") for name, sql in cursor.fetchall()
            }
            schema[table] = {
                "columns": columns,
                "foreign_keys": foreign_keys,
                "indexes": indexes,
                "checks": sorted(_checks(cursor, table)),
            }
    return _sorted(schema)


def _checks(cursor: Any, table: str) -> list[str]:
    """The ``CHECK (...)`` clauses of ``table``'s ``CREATE TABLE``, parentheses balanced."""
    cursor.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = %s", [table])
    (sql,) = cursor.fetchone()
    checks = []
    for match in re.finditer(r"CHECK \(", sql):
        depth, end = 1, match.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(sql[end], 0)
            end += 1
        checks.append(_generic(sql[match.start() : end]))
    return checks


def _generic(text: str) -> str:
    # SQLite numbers its automatic indexes in the order of the table's unique columns,
    # which says nothing about the schema.
    text = re.sub(r"sqlite_autoindex_(\w+?)_\d+", r"sqlite_autoindex_\1", text)
    return " ".join(text.split())


def _sorted(schema: dict[str, Any]) -> dict[str, Any]:
    return {
        table: {part: _order(value) for part, value in sorted(parts.items())}
        for table, parts in sorted(schema.items())
    }


def _order(value: Any) -> Any:
    return dict(sorted(value.items())) if isinstance(value, dict) else value


def main() -> None:
    """Migrate the database of ``DATABASE_URL`` from nothing to bsft_saga's initial
    migration, and print the schema it holds then as JSON."""
    import json

    import django
    from django.core.management import call_command
    from django.db import connection

    django.setup()
    call_command("migrate", "bsft_saga", "0001_initial", verbosity=0)
    print(json.dumps(schema_of(connection), indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
