"""A database that cannot hold bsft_saga's guarantees is refused before anything is written.

MariaDB (and MySQL) create neither the partial unique constraint on active instances nor the
one on pending timer names; Django only warns (``models.W036``), and a project may silence
that. ``bsft_saga.E003`` is an error instead, so ``migrate`` stops. Run against the real
MariaDB of the machine, in a fresh ``manage.py`` process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.services import connect_mariadb, require_mariadb

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def mariadb_database() -> Iterator[str]:
    """An empty MariaDB database of this test's own, dropped afterwards."""
    require_mariadb()
    name = f"bsft_saga_check_{uuid.uuid4().hex[:8]}"
    server = connect_mariadb()
    try:
        with server.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE `{name}`")
        yield name
        with server.cursor() as cursor:
            cursor.execute(f"DROP DATABASE `{name}`")
    finally:
        server.close()


def _manage(database: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.workers.mariadb_settings",
        "BSFT_SAGA_MARIADB_NAME": database,
        "PYTHONPATH": str(ROOT),
    }
    return subprocess.run(
        [sys.executable, "-m", "django", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _tables(database: str) -> list[str]:
    server = connect_mariadb(database)
    try:
        with server.cursor() as cursor:
            cursor.execute("SHOW TABLES")
            return [row[0] for row in cursor.fetchall()]
    finally:
        server.close()


def test_check_names_the_database_and_what_it_cannot_enforce(mariadb_database: str) -> None:
    result = _manage(mariadb_database, "check", "--database", "default")

    assert result.returncode == 1, result.stderr
    assert (
        "DATABASES['default']: (bsft_saga.E003) The database backend 'MariaDB' cannot enforce "
        "a unique constraint with a condition"
    ) in result.stderr
    assert "PostgreSQL (production) or SQLite (development)" in result.stderr


def test_migrate_stops_before_it_creates_a_table(mariadb_database: str) -> None:
    result = _manage(mariadb_database, "migrate")

    assert result.returncode == 1, result.stdout
    assert "bsft_saga.E003" in result.stderr
    assert _tables(mariadb_database) == []
