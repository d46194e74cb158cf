"""Guards for tests that need a real PostgreSQL, Redis or MariaDB.

A developer without the service gets a skip that says what is missing and where it was
looked for. Under ``CI=true`` the same situation is a failure: CI provides both services, so
a missing one is a broken machine, and a silently skipped race or worker test would let the
suite go green without testing what it claims to.

``require_postgres_backend()`` is different: it skips whenever the suite runs on another
backend, in CI too, because ``make test`` runs the whole suite a second time on PostgreSQL.
"""

from __future__ import annotations

import os
from typing import Any, NoReturn
from urllib.parse import urlsplit

import pytest

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/15"
DEFAULT_POSTGRES_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
#: The MariaDB server of the tests that create a database of their own (``BSFT_SAGA_MARIADB_*``).
MARIADB_HOST = os.environ.get("BSFT_SAGA_MARIADB_HOST", "127.0.0.1")
MARIADB_PORT = int(os.environ.get("BSFT_SAGA_MARIADB_PORT", "3306"))
MARIADB_USER = os.environ.get("BSFT_SAGA_MARIADB_USER", "root")
CONNECT_TIMEOUT_SECONDS = 2


def in_ci() -> bool:
    """Return whether missing services must fail the run (``CI=true``)."""
    return os.environ.get("CI", "").lower() == "true"


def _unavailable(service: str, address: str, error: BaseException | str) -> NoReturn:
    message = f"{service} not reachable at {address}: {error}"
    if in_ci():
        pytest.fail(f"{message}; CI requires it", pytrace=False)
    pytest.skip(f"{message}; set CI=true to make this a failure")


def redis_url() -> str:
    """Return the Redis URL the tests and the Celery worker use."""
    return os.environ.get("CELERY_BROKER_URL", DEFAULT_REDIS_URL)


def require_redis() -> None:
    """Return if Redis answers PING; otherwise skip the test (fail under ``CI=true``)."""
    url = redis_url()
    address = _redact(url)
    try:
        import redis
    except ImportError as exc:  # pragma: no cover - redis is a hard dependency
        _unavailable("Redis", address, exc)
    client = redis.Redis.from_url(
        url,
        socket_connect_timeout=CONNECT_TIMEOUT_SECONDS,
        socket_timeout=CONNECT_TIMEOUT_SECONDS,
    )
    try:
        client.ping()
    except (redis.RedisError, OSError) as exc:
        _unavailable("Redis", address, exc)
    finally:
        client.close()


def postgres_dsn() -> str:
    """Return a libpq DSN for the server's maintenance database.

    The host, port and user come from ``DATABASE_URL`` when it names PostgreSQL, so the check
    looks where the suite will connect; otherwise the local default (127.0.0.1:5432, user
    postgres) that ``make test`` uses.
    """
    url = os.environ.get("DATABASE_URL", "")
    parts = urlsplit(url)
    if parts.scheme not in {"postgres", "postgresql", "pgsql"}:
        return DEFAULT_POSTGRES_DSN
    fields = {
        "host": parts.hostname or "127.0.0.1",
        "port": str(parts.port or 5432),
        "user": parts.username or "postgres",
        "dbname": "postgres",
    }
    if parts.password:
        fields["password"] = parts.password
    return " ".join(f"{key}={value}" for key, value in fields.items())


def require_postgres() -> None:
    """Return if a PostgreSQL server accepts connections; otherwise skip (fail under CI)."""
    dsn = postgres_dsn()
    address = " ".join(part for part in dsn.split() if not part.startswith("password="))
    try:
        import psycopg
    except ImportError as exc:
        _unavailable("PostgreSQL", address, f"psycopg is not installed ({exc})")
    try:
        psycopg.connect(dsn, connect_timeout=CONNECT_TIMEOUT_SECONDS).close()
    except psycopg.Error as exc:
        _unavailable("PostgreSQL", address, str(exc).strip())


def require_postgres_backend() -> None:
    """Skip the test unless the default database connection is PostgreSQL.

    Not a failure in CI: the SQLite run skips these legitimately and the PostgreSQL run of
    ``make test`` executes them.
    """
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip(
            "needs PostgreSQL: run with DATABASE_URL=postgres://... "
            "(make test does this in its second run)"
        )


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


def connect_mariadb(database: str | None = None) -> Any:
    """A mysqlclient connection (autocommit) to the MariaDB of the tests."""
    import MySQLdb

    connection = MySQLdb.connect(
        host=MARIADB_HOST,
        port=MARIADB_PORT,
        user=MARIADB_USER,
        database=database or "",
        connect_timeout=CONNECT_TIMEOUT_SECONDS,
    )
    connection.autocommit(True)
    return connection


def require_mariadb() -> None:
    """Return if MariaDB accepts connections (via mysqlclient); otherwise skip (fail under CI)."""
    address = f"{MARIADB_HOST}:{MARIADB_PORT} (user {MARIADB_USER})"
    try:
        import MySQLdb
    except ImportError as exc:
        _unavailable("MariaDB", address, f"mysqlclient is not installed ({exc})")
    try:
        connect_mariadb().close()
    except MySQLdb.Error as exc:
        _unavailable("MariaDB", address, str(exc).strip())


def require_mysql_backend() -> None:
    """Skip the test unless the default database connection is MariaDB or MySQL (not a
    failure in CI: ``make test-mariadb`` runs the suite on MariaDB)."""
    from django.db import connection

    if connection.vendor != "mysql":
        pytest.skip("needs MariaDB or MySQL: run with DATABASE_URL=mysql://... (make test-mariadb)")


def require_server_database() -> None:
    """Skip the test on SQLite: it needs a database server's concurrent sessions and row
    locks (PostgreSQL, MariaDB or MySQL), where SQLite has one writer at a time.

    Not a failure in CI: ``make test`` runs the whole suite on PostgreSQL and MariaDB too.
    """
    from django.db import connection

    if connection.vendor == "sqlite":
        pytest.skip(
            "needs a database server: run with DATABASE_URL=postgres://... or mysql://... "
            "(make test does both)"
        )
