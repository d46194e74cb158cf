"""The SQL that docs/operations/postgresql.md recommends runs as written against bsft_saga's
tables, and does what it says (PostgreSQL only; rolled back)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.db import connection

from tests.support.services import require_postgres_backend

pytestmark = pytest.mark.django_db

PAGE = Path(__file__).resolve().parents[2] / "docs" / "operations" / "postgresql.md"
SQL_BLOCK = re.compile(r"```sql\n(.*?)```", re.S)


def _section_sql() -> list[str]:
    blocks = SQL_BLOCK.findall(PAGE.read_text(encoding="utf-8"))
    assert len(blocks) == 2, "the page's two SQL examples moved: update this test"
    return blocks


def _statements(block: str) -> list[str]:
    lines = [line for line in block.splitlines() if not line.lstrip().startswith("--")]
    return [statement.strip() for statement in "\n".join(lines).split(";") if statement.strip()]


def _reloptions(table: str) -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = %s", [table])
        (options,) = cursor.fetchone()
    return dict(option.split("=", 1) for option in options or [])


def test_the_recommended_autovacuum_settings_apply_to_the_saga_tables() -> None:
    require_postgres_backend()
    vacuum, _monitoring = _section_sql()

    with connection.cursor() as cursor:
        for statement in _statements(vacuum):
            cursor.execute(statement)

    assert _reloptions("bsft_saga_sagatimeout")["autovacuum_vacuum_scale_factor"] == "0"
    assert _reloptions("bsft_saga_sagainstance")["autovacuum_vacuum_threshold"] == "10000"
    assert _reloptions("bsft_saga_sagaoutboxmessage")["autovacuum_vacuum_scale_factor"] == "0"
    inbox = _reloptions("bsft_saga_sagainboxentry")
    assert inbox["autovacuum_vacuum_insert_threshold"] == "100000"


def test_the_horizon_query_names_a_session_holding_a_snapshot() -> None:
    require_postgres_backend()
    _vacuum, monitoring = _section_sql()
    timeout, query = _statements(monitoring)
    assert timeout.startswith("ALTER ROLE app SET idle_in_transaction_session_timeout")

    with connection.cursor() as cursor:
        # The test's own transaction holds a snapshot once it has read something.
        cursor.execute("SELECT 1")
        cursor.execute(timeout.replace("ALTER ROLE app", "ALTER ROLE CURRENT_USER"))
        cursor.execute(query)
        rows = cursor.fetchall()
        cursor.execute("SELECT pg_backend_pid()")
        (own_pid,) = cursor.fetchone()

    # Ours is listed, unless five sessions (of any database) hold older snapshots.
    assert own_pid in [row[0] for row in rows] or len(rows) == 5
