"""What bsft_saga needs of MariaDB and MySQL, and how it holds its guarantees there.

PostgreSQL and SQLite enforce "one active instance per key", "one pending timer per name"
and "one kept event per key and message id" with partial unique indexes. MariaDB and
MySQL have none, and Django does not create a unique constraint with a condition there.
Migration ``0003_mysql_uniqueness`` creates the equivalent on them alone: a stored
generated column that is 1 while the row is in the set the condition names and NULL
otherwise, and a unique index, under the constraint's own name, over that flag and the
constraint's columns. A unique index never compares NULLs, so rows outside the set never
conflict, and rows inside it are unique: as strict as the partial index. The same
migration compares every text column byte for byte and without padding (keys ``"A-1"``,
``"a-1"`` and ``"a-1 "`` are three keys, as on PostgreSQL), whatever the database's
default collation.

A pass claims ready rows in the order they become ready. On PostgreSQL and SQLite a partial
index on that expression serves the claim; Django creates neither partial indexes nor, on
MariaDB, indexes on an expression there. Migration ``0004_mysql_ready_order`` gives each
table a stored generated column ``ready_at`` instead (the ready time while the row is
pending, NULL once it is retired) and an index over ``(ready_at, id)``, and the querysets
order and filter by :class:`StoredReadyAt` on MariaDB and MySQL, so that a claim reads only
the rows it takes, in order, and concurrent claims lock disjoint batches.

The claim of due rows needs ``SELECT ... FOR UPDATE SKIP LOCKED``: MariaDB 10.6 and
MySQL 8.0.1 are the first with it. The guarantees also need ``READ COMMITTED``: under
``REPEATABLE READ`` (MariaDB's and MySQL's default) a transaction keeps reading the
snapshot of its first read, so a step's version check and a claim's conditional update
would compare against rows other transactions have already changed.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from django.core.checks import CheckMessage
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import DateTimeField, Expression

__all__ = [
    "GENERATED_UNIQUE_CONSTRAINTS",
    "MINIMUM_MARIADB",
    "MINIMUM_MYSQL",
    "READY_AT_COLUMN",
    "StoredReadyAt",
    "VendorModelChecks",
    "isolation_level",
    "retrying_deadlocks",
    "storable_uuid",
    "stores_ready_order",
    "unsupported_version",
]

#: The first MariaDB with ``SELECT ... FOR UPDATE SKIP LOCKED``.
MINIMUM_MARIADB = (10, 6)
#: The first MySQL with ``SELECT ... FOR UPDATE SKIP LOCKED``.
MINIMUM_MYSQL = (8, 0, 1)
#: The conditional unique constraints that migration ``0003_mysql_uniqueness`` creates on
#: MariaDB and MySQL as a unique index over a generated flag column.
GENERATED_UNIQUE_CONSTRAINTS = frozenset(
    {
        "bsft_saga_one_active_instance_per_key",
        "bsft_saga_one_pending_timeout_name",
        "bsft_saga_kept_once_per_key",
    }
)
#: The stored generated column of migration ``0004_mysql_ready_order``: a pending row's ready
#: time (NULL once it is retired), indexed with ``id`` in the claim's order.
READY_AT_COLUMN = "ready_at"
#: The isolation levels under which bsft_saga's guarantees hold on MariaDB and MySQL.
SAFE_ISOLATION_LEVELS = frozenset({"read committed"})


def _version(numbers: tuple[int, ...]) -> str:
    return ".".join(str(number) for number in numbers)


def unsupported_version(connection: BaseDatabaseWrapper) -> str | None:
    """Why the MariaDB or MySQL server of ``connection`` cannot hold bsft_saga's
    guarantees (the version found and the version needed), or ``None`` if it can.

    Django's own feature flag decides, from the version it asks the server for (one query,
    cached on the connection); the minimums here only name the version needed.
    """
    if connection.features.has_select_for_update_skip_locked:
        return None
    server: Any = connection
    found = tuple(server.mysql_version)
    name = "MariaDB" if server.mysql_is_mariadb else "MySQL"
    needed = MINIMUM_MARIADB if server.mysql_is_mariadb else MINIMUM_MYSQL
    return (
        f"{name} {_version(found)} has no SELECT ... FOR UPDATE SKIP LOCKED, which "
        f"bsft_saga's claim of due rows needs: {name} {_version(needed)} or later is needed"
    )


def isolation_level(connection: BaseDatabaseWrapper) -> str:
    """The transaction isolation level Django sets on the connection's sessions.

    Django's MySQL backend reads ``OPTIONS["isolation_level"]`` and defaults to
    ``"read committed"``; ``None`` there keeps the server's own default (REPEATABLE READ
    unless the server is configured otherwise), reported here as ``"server default"``.
    """
    options = connection.settings_dict.get("OPTIONS") or {}
    level = options.get("isolation_level", "read committed")
    return "server default" if level is None else str(level).lower()


def storable_uuid(value: uuid.UUID, *, field: str, where: str) -> uuid.UUID:
    """Return ``value`` if the default database can store it as ``field``; else raise
    ``ValueError`` naming ``where`` (the call).

    MariaDB's UUID column (Django's ``UUIDField`` there since MariaDB 10.7) refuses a UUID
    of version 8 or above with the RFC 4122 variant, e.g. ``uuid.UUID(bytes=os.urandom(16))``
    or a hash's digest, where PostgreSQL, MySQL and SQLite store any 128 bits. Version 1 to
    7 UUIDs (``uuid4()``, ``uuid5()``, time-ordered ones) are stored everywhere.
    """
    from django.db import DEFAULT_DB_ALIAS, connections

    connection = connections[DEFAULT_DB_ALIAS]
    version, variant = value.time_hi_version >> 12, value.clock_seq_hi_variant >> 4
    if (
        version < 8
        or not 4 <= variant <= 11
        or connection.vendor != "mysql"
        or not connection.features.has_native_uuid_field
    ):
        return value
    raise ValueError(
        f"{where}: {field} {value} cannot be stored: MariaDB's UUID column refuses UUID "
        f"version {version}; use a version 1 to 7 UUID (uuid.uuid4(), uuid.uuid5())"
    )


class StoredReadyAt(Expression):
    """A row's ``ready_at`` column on MariaDB and MySQL: when it becomes ready while it is
    pending, NULL once it is retired (migration ``0004_mysql_ready_order``).

    The database computes it on every write; no model declares it, so this expression
    names the column of the query's own table (relabeled with it in a subquery). Filtered
    with ``<=`` it holds pending rows alone, and ordered with ``id`` it is read down the
    index ``(ready_at, id)`` with no sort.
    """

    output_field = DateTimeField()

    def __init__(self, alias: str | None = None) -> None:
        super().__init__()
        self.alias = alias

    def resolve_expression(
        self,
        query: Any = None,
        allow_joins: bool = True,
        reuse: Any = None,
        summarize: bool = False,
        for_save: bool = False,
    ) -> StoredReadyAt:
        return StoredReadyAt(query.get_initial_alias())

    def relabeled_clone(self, change_map: Mapping[str, str]) -> StoredReadyAt:
        return StoredReadyAt(change_map.get(self.alias, self.alias) if self.alias else None)

    def get_group_by_cols(self) -> list[Any]:
        return [self]

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, tuple[Any, ...]]:
        if self.alias is None:
            raise ValueError("StoredReadyAt must be resolved against a query first")
        column = connection.ops.quote_name(READY_AT_COLUMN)
        return f"{compiler.quote_name_unless_alias(self.alias)}.{column}", ()


def stores_ready_order(connection: BaseDatabaseWrapper) -> bool:
    """Whether the claim's ready order is read from :class:`StoredReadyAt` on
    ``connection`` (MariaDB and MySQL) rather than from the expression itself."""
    return connection.vendor == "mysql"


T = TypeVar("T")

#: InnoDB's error of a transaction it rolled back whole to break a deadlock.
_DEADLOCK = 1213
#: How often :func:`retrying_deadlocks` runs a transaction that InnoDB keeps rolling back.
DEADLOCK_ATTEMPTS = 3


def retrying_deadlocks(transaction: Callable[[], T]) -> T:
    """Run ``transaction`` (a function that opens and commits a transaction of its own) and
    return what it returns; on MariaDB and MySQL, run it again when InnoDB rolled it back
    to break a deadlock, up to ``DEADLOCK_ATTEMPTS`` times in all.

    InnoDB picks a victim among the transactions of a lock cycle and rolls it back whole
    (error 1213), even a ``SKIP LOCKED`` claim: nothing of it stayed, so running it again is
    safe. Inside a caller's transaction, which the rollback ended too, nothing is retried.
    Any other error, and the last deadlock, propagate.
    """
    from django.db import DEFAULT_DB_ALIAS, OperationalError, connections

    connection = connections[DEFAULT_DB_ALIAS]
    retry = connection.vendor == "mysql" and not connection.in_atomic_block
    for attempt in range(1, DEADLOCK_ATTEMPTS + 1):
        try:
            return transaction()
        except OperationalError as exc:
            deadlock = bool(exc.args) and exc.args[0] == _DEADLOCK
            if not (retry and deadlock) or attempt == DEADLOCK_ATTEMPTS:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


class VendorModelChecks:
    """Leaves out Django's model warnings that do not apply to bsft_saga on MySQL.

    On MariaDB and MySQL Django warns that it creates no unique constraint with a
    condition (``models.W036``), that it creates the conditional indexes over every row
    (``models.W037``), and, on MariaDB, that it creates no index on an expression
    (``models.W043``). The unique constraints are the ones migration
    ``0003_mysql_uniqueness`` creates there (a warning for another one stays); the
    indexes only serve speed, and a condition only makes them smaller. A project that
    would otherwise have to silence these ids for every app keeps them for its own models.
    """

    @classmethod
    def check(cls, **kwargs: Any) -> list[CheckMessage]:
        from django.db import connections

        messages: list[CheckMessage] = super().check(**kwargs)  # type: ignore[misc]
        databases = kwargs.get("databases") or ()
        if not any(connections[alias].vendor == "mysql" for alias in databases):
            return messages
        constraints = cls._meta.constraints  # type: ignore[attr-defined]
        provided = all(
            constraint.name in GENERATED_UNIQUE_CONSTRAINTS
            for constraint in constraints
            if getattr(constraint, "condition", None) is not None
        )
        dropped = {"models.W037", "models.W043"} | ({"models.W036"} if provided else set())
        return [message for message in messages if message.id not in dropped]
