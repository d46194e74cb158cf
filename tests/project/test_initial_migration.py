"""bsft_saga ships one initial migration, squashed from the migrations written before the
first release: run from nothing, it creates the schema they did.

``tests/project/schema/<vendor>.json`` is that schema as the earlier migrations created it
(read back with ``tests.support.schema``, applied one after the other on an empty database),
taken before they were replaced, under the Django version it names: the SQL text Django
writes for a partial index's condition differs between versions (``NOT "is_complete"``,
``"is_complete" = 0``), so other versions are not compared. Columns, types, nullability,
defaults, every index with its partial condition or expression, every constraint and
foreign key are compared.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import django
import pytest
from django.db import connection

from tests.conftest import ROOT, database_url_of

SNAPSHOTS = Path(__file__).parent / "schema"

pytestmark = pytest.mark.django_db


@pytest.fixture
def empty_database(tmp_path: Path) -> Iterator[str]:
    """The DATABASE_URL of a database with nothing in it, on the backend of this run."""
    if connection.vendor == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.sqlite3'}"
        return
    if not (SNAPSHOTS / f"{connection.vendor}.json").exists():
        pytest.skip(f"no schema snapshot for {connection.vendor}")
    name = f"bsft_saga_empty_{uuid.uuid4().hex[:12]}"
    with connection.cursor() as cursor:
        cursor.execute(f'CREATE DATABASE "{name}"')
    try:
        yield database_url_of({**connection.settings_dict, "NAME": name})
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)  # CREATE DATABASE runs outside a transaction
def test_the_initial_migration_creates_the_schema_of_the_migrations_it_replaced(
    empty_database: str,
) -> None:
    snapshot = SNAPSHOTS / f"{connection.vendor}.json"
    if not snapshot.exists():
        pytest.skip(f"no schema snapshot for {connection.vendor}")
    taken = json.loads(snapshot.read_text())
    running = ".".join(str(part) for part in django.VERSION[:2])
    if taken["django"] != running:
        pytest.skip(f"the schema snapshot was read under Django {taken['django']}, not {running}")
    env = {
        "DATABASE_URL": empty_database,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PYTHONPATH": str(ROOT),
        "PATH": "/usr/bin:/bin",
    }

    migrated = subprocess.run(
        [sys.executable, "-m", "tests.support.schema"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert migrated.returncode == 0, migrated.stderr
    schema: dict[str, Any] = json.loads(migrated.stdout)
    expected: dict[str, Any] = taken["tables"]
    assert sorted(schema) == sorted(expected)
    for table, parts in expected.items():
        assert schema[table] == parts, table


def test_bsft_saga_has_one_initial_migration_and_the_others_follow_it() -> None:
    migrations = sorted(p.name for p in (ROOT / "bsft_saga" / "migrations").glob("0*.py"))
    assert migrations[0] == "0001_initial.py"
    initial = [name for name in migrations if "initial" in name]
    assert initial == ["0001_initial.py"]
    numbers = [int(name[:4]) for name in migrations]
    assert numbers == list(range(1, len(migrations) + 1))
