"""The bench's own PostgreSQL databases, and resetting the saga tables between runs.

Every database the bench touches is named ``bsft_saga_bench*`` (see ``config``): the main
one holds the step and drain runs, and the poll gets two of its own, created for the run
and dropped after it. ``make soak`` has ``bsft_saga_soak*``, created and dropped the same
way. Nothing here connects to the test databases or to ``bsft_saga``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import psycopg
from psycopg import sql

# Shared with the tests that drain a backlog of their own (tests/processes).
from tests.support.saga_tables import reset_saga_tables as reset_saga_tables
from tests.support.saga_tables import saga_tables as saga_tables
from tests.support.saga_tables import vacuum_analyze as vacuum_analyze

# The only databases this module drops or empties.
OWN_PREFIXES = ("bsft_saga_bench", "bsft_saga_soak")
#: The SQLite file of the embedded default's figures (step and drain), deleted after each.
SQLITE_FILE = Path(__file__).resolve().parent / ".bench.sqlite3"

# Reported with the results: what decides how much a commit costs on this server.
SERVER_SETTINGS = (
    "server_version",
    "synchronous_commit",
    "fsync",
    "full_page_writes",
    "wal_sync_method",
    "commit_delay",
    "shared_buffers",
)


class Server(Protocol):
    """Where the PostgreSQL server is: ``config.Config`` and ``config.SoakConfig``."""

    @property
    def pg_host(self) -> str: ...
    @property
    def pg_port(self) -> int: ...
    @property
    def pg_user(self) -> str: ...


def _maintenance(config: Server) -> psycopg.Connection[Any]:
    try:
        return psycopg.connect(
            host=config.pg_host,
            port=config.pg_port,
            user=config.pg_user,
            dbname="postgres",
            connect_timeout=3,
            autocommit=True,
        )
    except psycopg.OperationalError as exc:
        raise SystemExit(
            f"the bench needs PostgreSQL at {config.pg_host}:{config.pg_port} "
            f"(user {config.pg_user}): {exc}"
        ) from None


def ensure_database(config: Server, name: str) -> None:
    """Create ``name`` unless it exists (like the Makefile's PG_CHECK)."""
    with _maintenance(config) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if exists is None:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def recreate_database(config: Server, name: str) -> None:
    """Drop ``name`` if a crashed run left it behind, then create it empty."""
    drop_database(config, name)
    with _maintenance(config) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def drop_database(config: Server, name: str) -> None:
    assert name.startswith(OWN_PREFIXES), name
    with _maintenance(config) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def server_facts(names: tuple[str, ...] = SERVER_SETTINGS) -> dict[str, str]:
    """The settings ``names``, as ``SHOW`` prints them (Django's connection)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT name, current_setting(name) FROM unnest(%s::text[]) AS name",
            [list(names)],
        )
        return dict(cursor.fetchall())


def commit_latency(commits: int = 200) -> dict[str, float]:
    """Median milliseconds of a one-row INSERT in autocommit, with and without waiting for
    the WAL flush (``synchronous_commit`` on / off for this session).

    A fact about the machine, for reading the ratios: group commit saves one flush per
    timer, which is worth much on a slow disk and little on a fast one.
    """
    from django.db import connection

    from bench.measure import clock, median

    found = {}
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE IF NOT EXISTS bench_commit_probe (id bigserial PRIMARY KEY)")
        for label, setting in (("commit_ms", "on"), ("commit_ms_without_flush", "off")):
            cursor.execute("SELECT set_config('synchronous_commit', %s, false)", [setting])
            times = []
            for _ in range(commits):
                began = clock()
                cursor.execute("INSERT INTO bench_commit_probe DEFAULT VALUES")
                times.append((clock() - began) * 1000)
            found[label] = round(median(times), 3)
        cursor.execute("RESET synchronous_commit")
        cursor.execute("DROP TABLE bench_commit_probe")
    return found


def disable_autovacuum() -> None:
    """Leave the saga tables to the bench's own VACUUMs (the poll's databases only).

    Otherwise autovacuum picks one of the poll's two databases at a moment of its choosing,
    and the claims timed in the other one share the machine with it.
    """
    from django.db import connection

    with connection.cursor() as cursor:
        for table in saga_tables():
            name = connection.ops.quote_name(table)
            cursor.execute(f"ALTER TABLE {name} SET (autovacuum_enabled = false)")


def vacuum_timers() -> None:
    """Remove the dead versions rolled-back claims leave in the timer table and its indexes."""
    from django.db import connection

    from bsft_saga.models import SagaTimeout

    table = connection.ops.quote_name(SagaTimeout._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM (INDEX_CLEANUP ON) {table}")
