"""The PgBouncer run really goes through PgBouncer (``make test-pgbouncer``).

``tests/support/pgbouncer.py`` starts PgBouncer in transaction mode and runs the dispatcher tests
through it; these tests fail that run if the test connection or a child's ``DATABASE_URL``
reached the server directly — which a wrong URL would do without any other test noticing.
They also hold docs/operations/pgbouncer.md ("Behind PgBouncer") to its word: the settings it shows
work through the pooler, and prepared statements fail as it says. Skipped in every other
run (there is no PgBouncer to ask).
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.db import DatabaseError, connection
from django.db.utils import ConnectionHandler

from tests.support.pgbouncer import PORT_VARIABLE, admin_connection
from tests.support.services import require_postgres_backend

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

PAGE = Path(__file__).resolve().parents[2] / "docs" / "operations" / "pgbouncer.md"
PYTHON_BLOCK = re.compile(r"```python\n(.*?)```", re.S)
# More executions of one statement per connection than psycopg's prepare_threshold (5).
EXECUTIONS = 8
PREPARED_STATEMENT_CLASH = re.compile(
    r'prepared statement "_pg3_\d+" (already exists|does not exist)'
)


@pytest.fixture
def pgbouncer_port() -> int:
    require_postgres_backend()
    port = os.environ.get(PORT_VARIABLE)
    if not port:
        pytest.skip(f"not a PgBouncer run: {PORT_VARIABLE} is unset (make test-pgbouncer sets it)")
    return int(port)


def _show(port: int, what: str) -> list[dict[str, Any]]:
    with admin_connection(port, connection.settings_dict["USER"] or "postgres") as admin:
        cursor = admin.execute(f"SHOW {what}")
        names = [column.name for column in cursor.description or ()]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def test_the_test_connection_is_a_client_of_pgbouncer_in_transaction_mode(
    pgbouncer_port: int,
) -> None:
    connection.ensure_connection()
    raw = connection.connection
    with socket.socket(fileno=os.dup(raw.pgconn.socket)) as sock:
        local_port = sock.getsockname()[1]
    with connection.cursor() as cursor:
        cursor.execute("SELECT inet_server_port()")
        (server_port,) = cursor.fetchone()

    clients = _show(pgbouncer_port, "CLIENTS")
    config = {row["key"]: row["value"] for row in _show(pgbouncer_port, "CONFIG")}

    assert int(connection.settings_dict["PORT"]) == pgbouncer_port
    assert [c["database"] for c in clients if c["port"] == local_port] == [
        connection.settings_dict["NAME"]
    ]
    assert server_port != pgbouncer_port  # the statement ran on the server behind it
    assert config["pool_mode"] == "transaction"


def test_child_processes_are_given_pgbouncer_to_connect_to(
    pgbouncer_port: int, subprocess_env: dict[str, str]
) -> None:
    url = urlsplit(subprocess_env["DATABASE_URL"])
    assert (url.hostname, url.port, url.path) == (
        "127.0.0.1",
        pgbouncer_port,
        f"/{connection.settings_dict['NAME']}",
    )


def _documented_settings() -> dict[str, Any]:
    [block] = PYTHON_BLOCK.findall(PAGE.read_text(encoding="utf-8"))
    namespace: dict[str, Any] = {}
    exec(block, namespace)
    documented: dict[str, Any] = namespace["DATABASES"]["default"]
    return documented


@contextmanager
def _clients(settings: dict[str, Any], count: int) -> Iterator[list[Any]]:
    """``count`` Django connections with ``settings``, to the test database via PgBouncer."""
    where = {key: connection.settings_dict[key] for key in ("HOST", "PORT", "NAME", "USER")}
    merged = {**connection.settings_dict, **settings, **where}
    clients = [ConnectionHandler({"default": merged})["default"] for _ in range(count)]
    try:
        yield clients
    finally:
        for client in clients:
            client.close()


def _take_turns(clients: list[Any]) -> None:
    """Run one parameterised statement ``EXECUTIONS`` times on each client, in turn.

    PgBouncer hands the server connection a client just released to the next one, so the
    clients share one: what one of them leaves in the session, the next one meets.
    """
    for _round in range(2):
        for client in clients:
            with client.cursor() as cursor:
                for n in range(EXECUTIONS):
                    cursor.execute("SELECT %s::int", [n])
                    assert cursor.fetchone() == (n,)


def test_the_documented_settings_work_through_pgbouncer(pgbouncer_port: int) -> None:
    documented = _documented_settings()
    assert documented["DISABLE_SERVER_SIDE_CURSORS"] is True
    assert "prepare_threshold" not in documented.get("OPTIONS", {})

    with _clients(documented, 2) as clients:
        _take_turns(clients)


def test_server_side_binding_alone_works_through_pgbouncer(pgbouncer_port: int) -> None:
    with _clients({"OPTIONS": {"server_side_binding": True}}, 2) as clients:
        _take_turns(clients)


def test_prepared_statements_fail_through_pgbouncer_before_1_21(
    pgbouncer_port: int,
) -> None:
    [row] = _show(pgbouncer_port, "VERSION")
    version = tuple(int(n) for n in re.findall(r"\d+", row["version"])[:2])
    if version >= (1, 21):
        pytest.skip(f"{row['version']} may track prepared statements (max_prepared_statements)")
    prepared = {"OPTIONS": {"server_side_binding": True, "prepare_threshold": 5}}

    with _clients(prepared, 2) as clients, pytest.raises(DatabaseError) as failure:
        _take_turns(clients)

    assert PREPARED_STATEMENT_CLASH.search(str(failure.value)), failure.value
