"""A MariaDB database is set up whole by ``migrate``, and checked by ``check``, in a fresh
``manage.py`` process against the machine's real MariaDB: the tables, the unique indexes over
generated columns that stand for the partial unique constraints (migration 0003), the
stored ready times of the claim's order (migration 0004), and the warning of an isolation
level that would break the guarantees. (The versions that E003 refuses, older than any
server here, are in tests/db/test_mysql.py.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.services import connect_mariadb, require_mariadb

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow  # a fresh manage.py process each


@pytest.fixture
def mariadb_database() -> Iterator[str]:
    """An empty MariaDB database of this test's own, dropped afterwards."""
    require_mariadb()
    name = f"bsft_saga_check_{uuid.uuid4().hex[:8]}"
    server = connect_mariadb()
    try:
        with server.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        yield name
        with server.cursor() as cursor:
            cursor.execute(f"DROP DATABASE `{name}`")
    finally:
        server.close()


@pytest.fixture
def migrated_database(mariadb_database: str) -> str:
    """``mariadb_database`` after ``migrate``, which succeeded."""
    result = _manage(mariadb_database, "migrate", "--noinput")
    assert result.returncode == 0, result.stderr
    return mariadb_database


def _manage(
    database: str, *args: str, options: dict[str, object] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.workers.mariadb_settings",
        "BSFT_SAGA_MARIADB_NAME": database,
        "BSFT_SAGA_MARIADB_OPTIONS_JSON": json.dumps(options or {}),
        "PYTHONPATH": str(ROOT),
    }
    return subprocess.run(
        [sys.executable, "-m", "django", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def _query(database: str, sql: str) -> list[tuple[object, ...]]:
    server = connect_mariadb(database)
    try:
        with server.cursor() as cursor:
            cursor.execute(sql)
            return list(cursor.fetchall())
    finally:
        server.close()


def test_mariadb_10_6_or_later_passes_the_database_checks(mariadb_database: str) -> None:
    result = _manage(mariadb_database, "check", "--database", "default")

    assert result.returncode == 0, result.stderr
    assert "System check identified no issues" in result.stdout


def test_migrate_creates_the_unique_indexes_of_the_partial_constraints(
    migrated_database: str,
) -> None:
    unique = _query(
        migrated_database,
        "SELECT INDEX_NAME, GROUP_CONCAT(COLUMN_NAME ORDER BY SEQ_IN_INDEX) "
        "FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() "
        "AND INDEX_NAME IN ('bsft_saga_one_active_instance_per_key', "
        "'bsft_saga_one_pending_timeout_name', 'bsft_saga_kept_once_per_key') "
        "AND NON_UNIQUE = 0 GROUP BY INDEX_NAME ORDER BY INDEX_NAME",
    )
    assert unique == [
        ("bsft_saga_kept_once_per_key", "unowned_flag,saga_type,correlation_key,message_id"),
        ("bsft_saga_one_active_instance_per_key", "active_flag,saga_type,correlation_key"),
        ("bsft_saga_one_pending_timeout_name", "pending_flag,saga_id,name"),
    ]
    generated = _query(
        migrated_database,
        "SELECT COLUMN_NAME, GENERATION_EXPRESSION FROM information_schema.COLUMNS "
        "WHERE TABLE_SCHEMA = DATABASE() AND EXTRA LIKE '%GENERATED%' "
        "AND COLUMN_NAME LIKE '%\\_flag' ORDER BY COLUMN_NAME",
    )
    assert [name for name, _expression in generated] == [
        "active_flag",
        "pending_flag",
        "unowned_flag",
    ]


def test_migrate_makes_every_key_column_compare_byte_for_byte(migrated_database: str) -> None:
    collations = _query(
        migrated_database,
        "SELECT DISTINCT COLLATION_NAME FROM information_schema.COLUMNS "
        "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME LIKE 'bsft\\_saga\\_%' "
        "AND DATA_TYPE = 'varchar'",
    )
    assert collations == [("utf8mb4_nopad_bin",)]


def test_migrating_back_removes_what_0003_added(migrated_database: str) -> None:
    result = _manage(migrated_database, "migrate", "bsft_saga", "0002", "--noinput")

    assert result.returncode == 0, result.stderr
    assert (
        _query(
            migrated_database,
            "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
            "AND EXTRA LIKE '%GENERATED%'",
        )
        == []
    )


def test_check_warns_of_repeatable_read_naming_the_option(mariadb_database: str) -> None:
    result = _manage(
        mariadb_database,
        "check",
        "--database",
        "default",
        options={"isolation_level": "repeatable read"},
    )

    assert result.returncode == 0, result.stderr
    assert (
        "DATABASES['default']: (bsft_saga.W004) DATABASES['default']['OPTIONS']"
        "['isolation_level'] is 'repeatable read'"
    ) in result.stderr


def test_migrating_back_to_0003_removes_the_ready_order_columns(migrated_database: str) -> None:
    result = _manage(migrated_database, "migrate", "bsft_saga", "0003", "--noinput")

    assert result.returncode == 0, result.stderr
    left = _query(
        migrated_database,
        "SELECT TABLE_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
        "AND COLUMN_NAME = 'ready_at'",
    )
    assert left == []
