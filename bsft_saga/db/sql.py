"""The hot path's few fixed-shape writes, executed without building a QuerySet each time.

Handling one event, or firing one timer, runs a handful of single-table INSERTs and UPDATEs
whose shape never changes. Built through the QuerySet API, each costs more Python than the
database spends on it (an ORM ``update()`` of one row by primary key: about 0.55 ms on the
benchmark machine; the same statement through ``cursor.execute``: about 0.25 ms), and the
hot path is where bsft_saga competes with a hand-written loop (docs/performance.md).

So these helpers write each statement's SQL once, from the model's metadata (table and
column names quoted by the connection), and run it with values adapted by the model's own
fields (``get_db_prep_save`` / ``get_db_prep_value``), exactly as the ORM would bind them.
They know equality and ``IS NULL`` and nothing else; anything richer stays in the ORM.
Signals are not sent (the ORM's ``update()`` and ``bulk_create()`` send none either).

A multi-row INSERT is built for a few row counts only (``CHUNK_SIZES``, and each count
below the smallest), and a larger insert is split into such chunks: the cached SQL stays a
few kilobytes per table whatever the fan-out (cached per row count, 200 fan-outs of up to
2,000 rows once held 16 million characters), and no statement exceeds the backend's
parameter limit (SQLite's 999 ``connection.features.max_query_params``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from contextlib import nullcontext
from datetime import datetime
from functools import cache, lru_cache
from typing import Any, TypeVar, cast

from django.db import DEFAULT_DB_ALIAS, IntegrityError, connection, connections, models, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.base import ModelState
from django.db.models.fields import NOT_PROVIDED, Field

__all__ = [
    "CHUNK_SIZES",
    "among",
    "attnames",
    "insert",
    "insert_together",
    "insert_unless_present",
    "loaded",
    "select",
    "select_one",
    "update",
    "update_each",
    "update_then_insert",
    "update_then_insert_each",
]

#: The row counts of the multi-row INSERTs a large insert is split into, largest first
#: (those whose parameters fit ``max_query_params``); fewer rows than the smallest go in
#: one statement of exactly that many.
CHUNK_SIZES = (500, 100, 10)
#: The most parameters one PostgreSQL statement may bind (the wire protocol's limit).
_POSTGRESQL_MAX_PARAMS = 65_535


def insert(model: type[models.Model], rows: Sequence[Mapping[str, Any]]) -> None:
    """INSERT ``rows`` into ``model``'s table: one statement, or a few of ``CHUNK_SIZES``
    rows, all or nothing, for a larger insert.

    Each row maps field names to values; a field it leaves out gets its default, and an
    auto-incremented primary key is left to the database.
    """
    if not rows:
        return
    db = _db()
    statements = _insert_statements(model, rows, db)
    # Several statements: in a transaction (the caller's, if it runs in one).
    atomic = transaction.atomic(savepoint=False) if len(statements) > 1 else nullcontext()
    with atomic:
        for sql, params in statements:
            _execute(db, sql, params)


def insert_unless_present(model: type[models.Model], row: Mapping[str, Any]) -> bool:
    """INSERT ``row`` unless a row with its primary key (or another unique value of it)
    exists; return whether it was written.

    One statement, ``INSERT ... ON CONFLICT DO NOTHING`` on PostgreSQL and SQLite: a row
    already there raises nothing, so the caller's transaction goes on. MariaDB and MySQL
    have no such clause: there the plain INSERT's duplicate-key error is caught, and every
    other error (a missing foreign row, a value too long) is raised as usual.
    """
    db = _db()
    ((sql, params),) = _insert_statements(model, [row], db)
    if db.vendor == "mysql":
        return _insert_unless_duplicate(db, sql, params)
    with db.cursor() as cursor:
        cursor.execute(f"{sql} ON CONFLICT DO NOTHING", params)
        return bool(cursor.rowcount)


#: MariaDB's and MySQL's error code of a duplicate key (``ER_DUP_ENTRY``).
_MYSQL_DUPLICATE_KEY = 1062


def _insert_unless_duplicate(db: BaseDatabaseWrapper, sql: str, params: list[Any]) -> bool:
    """MariaDB and MySQL: INSERT, and return ``False`` for a duplicate key.

    Not ``INSERT IGNORE``, which turns every error into a warning (a truncated value, a
    missing foreign row), and not ``ON DUPLICATE KEY UPDATE``, whose count of a row already
    there is 1 under the ``CLIENT_FOUND_ROWS`` flag Django connects with. No savepoint is
    needed: InnoDB rolls back the failed statement alone, and the transaction goes on.
    """
    try:
        with db.cursor() as cursor:
            cursor.execute(sql, params)
    except IntegrityError as exc:
        if exc.args and exc.args[0] == _MYSQL_DUPLICATE_KEY:
            return False
        raise
    return True


def _insert_statements(
    model: type[models.Model], rows: Sequence[Mapping[str, Any]], db: BaseDatabaseWrapper
) -> list[tuple[str, list[Any]]]:
    """The INSERTs of ``rows``: on PostgreSQL one, of an array per column, whatever their
    number; elsewhere each of a row count its SQL is cached for."""
    names = tuple(dict.fromkeys(name for row in rows for name in row))  # every row's, in order
    fields = _insert_fields(model, names)
    if db.vendor == "postgresql" and len(rows) > 1:
        # A VALUES list would bind every value: a statement the driver parses again on each
        # execution (it caches none of more than 50 parameters) and the server plans anew
        # for each row count. With an array per column, the text and the parameters stay
        # the same for any number of rows.
        return [(_insert_unnest_sql(model, names), _inserted_columns(fields, rows, db))]
    statements = []
    start = 0
    for count in _chunk_counts(len(rows), len(fields), db):
        chunk = rows[start : start + count]
        start += count
        params = [param for row in chunk for param in _row_params(fields, row, db)]
        statements.append((_insert_sql(model, names, count, db.vendor), params))
    return statements


def _chunk_counts(rows: int, params_per_row: int, db: BaseDatabaseWrapper) -> list[int]:
    """Split ``rows`` into ``CHUNK_SIZES`` chunks, largest first, and one smaller rest."""
    limit = db.features.max_query_params or _POSTGRESQL_MAX_PARAMS
    counts = []
    for size in CHUNK_SIZES:
        if size * params_per_row <= limit:
            counts += [size] * (rows // size)
            rows %= size
    if rows:
        counts += [rows] if rows * params_per_row <= limit else [1] * rows
    return counts


def _row_params(
    fields: Sequence[Field[Any, Any]], row: Mapping[str, Any], db: BaseDatabaseWrapper
) -> list[Any]:
    """``row``'s values bound as the ORM binds them; a field it leaves out, its default."""
    return [
        field.get_db_prep_save(row[field.name] if field.name in row else field.get_default(), db)
        for field in fields
    ]


def _inserted_columns(
    fields: Sequence[Field[Any, Any]], rows: Sequence[Mapping[str, Any]], db: BaseDatabaseWrapper
) -> list[list[Any]]:
    """What :func:`_row_params` binds for each of ``rows``, column by column."""
    return [
        _column(
            _array_prep(field),
            [row[field.name] if field.name in row else field.get_default() for row in rows],
            db,
        )
        for field in fields
    ]


def _column(
    prepare: Callable[[Any, BaseDatabaseWrapper], Any],
    values: Sequence[Any],
    db: BaseDatabaseWrapper,
) -> list[Any]:
    """``values`` (one column of many rows) each bound with ``prepare``, a field's
    ``get_db_prep_save`` or ``get_db_prep_value``: a value that is the row before's own
    object is prepared once. A group's rows share most of theirs (their defaults, the
    flow's names, ``None`` s), and each preparation passes through several of the field's
    methods and the backend's."""
    column: list[Any] = []
    last: Any = column  # no value is this list
    param = None
    for value in values:
        if value is not last:
            last, param = value, prepare(value, db)
        column.append(param)
    return column


def _where_prep(field: Field[Any, Any]) -> Callable[[Any, BaseDatabaseWrapper], Any]:
    """How the ORM binds a value ``field`` is compared with (``get_db_prep_value``)."""
    return lambda value, db: field.get_db_prep_value(value, db, prepared=False)


#: Django's fields that bind a value of this exact type on PostgreSQL as it is: their
#: ``get_db_prep_save`` and ``get_db_prep_value`` return that value itself (``None`` for
#: ``None``). A datetime only if it is aware: a naive one is made aware, with a warning.
_BOUND_AS_IT_IS: dict[type[Field[Any, Any]], type] = {
    models.BooleanField: bool,
    models.CharField: str,
    models.DateTimeField: datetime,
    models.TextField: str,
    models.UUIDField: uuid.UUID,
}


@cache
def _array_prep(
    field: Field[Any, Any], *, where: bool = False
) -> Callable[[Any, BaseDatabaseWrapper], Any]:
    """How an array statement on PostgreSQL binds each value of ``field``'s column: as
    ``get_db_prep_save`` does (``get_db_prep_value``, for a ``where``), with the values
    that it would bind as they are passed straight through.

    A group of a hundred start events binds some two thousand values, most of them UUIDs,
    strings and aware datetimes, and each passes through four or five methods of its field
    and of the backend only to come back unchanged.
    """
    prepare = _where_prep(field) if where else field.get_db_prep_save
    target = field.target_field if type(field) is models.ForeignKey else field
    kind = _BOUND_AS_IT_IS.get(type(target))
    if kind is None:
        return prepare
    moments = kind is datetime

    def prepared(value: Any, db: BaseDatabaseWrapper) -> Any:
        if value is None or (
            type(value) is kind and not (moments and cast(datetime, value).utcoffset() is None)
        ):
            return value
        return prepare(value, db)

    return prepared


def _db() -> BaseDatabaseWrapper:
    """The default connection itself, looked up once per statement.

    ``django.db.connection`` is a proxy that finds the connection of the current thread
    (or task) on every attribute; the fields adapting a statement's values ask it for its
    operations once per value, which cost as much as the adapting.
    """
    return connections[DEFAULT_DB_ALIAS]


#: The placeholder of a PostgreSQL statement's array parameter (the ``unnest`` and
#: ``= ANY`` forms): psycopg binds it in binary (see :func:`_execute`).
_ARRAY = "%b"


def _execute(db: BaseDatabaseWrapper, sql: str, params: Sequence[Any]) -> None:
    """Run ``sql`` with ``params``.

    A statement binding arrays (``%b``) runs on a cursor that binds its parameters on the
    server, the arrays in binary: Django's own cursor binds on the client (unless
    ``OPTIONS["server_side_binding"]``), which writes every element of an array into the
    statement's text, quoted in Python and parsed again by the server; a group commit's
    arrays of a hundred states, inbox rows and journal entries cost a fired timer about a
    sixth of its time that way. The cursor is wrapped as Django wraps its own (errors
    translated, ``execute_wrapper()`` and query logging kept). The arrays are bound as
    text (``%s``) on psycopg 2, and where Django binds on the server but renders logged
    statements (``DEBUG``) with a client cursor, which knows no binary parameter.
    """
    cursor, statement = _cursor_for(db, sql)
    with cursor:
        cursor.execute(statement, params)


def _returned_keys(db: BaseDatabaseWrapper, sql: str, params: Sequence[Any]) -> set[Any]:
    """:func:`_execute` a statement that returns one key per row; return the keys."""
    cursor, statement = _cursor_for(db, sql)
    with cursor:
        cursor.execute(statement, params)
        return {row[0] for row in cursor.fetchall()}


def _cursor_for(db: BaseDatabaseWrapper, sql: str) -> tuple[Any, str]:
    """The cursor :func:`_execute` runs ``sql`` on, and the statement it runs."""
    if _ARRAY not in sql:
        return db.cursor(), sql
    binding = _server_binding_cursor()
    server_side = bool(getattr(db.features, "uses_server_side_binding", False))
    if binding is None or (server_side and db.queries_logged):
        return db.cursor(), sql.replace(_ARRAY, "%s")
    if server_side:
        return db.cursor(), sql
    db.ensure_connection()
    db.validate_thread_sharing()
    driver = binding(db.connection)
    return (db.make_debug_cursor(driver) if db.queries_logged else db.make_cursor(driver)), sql


@cache
def _server_binding_cursor() -> Any:
    """Django's server-binding cursor class on psycopg 3; ``None`` on psycopg 2."""
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    if not is_psycopg3:
        return None
    from django.db.backends.postgresql.base import ServerBindingCursor

    return ServerBindingCursor


def insert_together(
    tables: Sequence[tuple[type[models.Model], Sequence[Mapping[str, Any]]]],
) -> None:
    """INSERT rows into several tables, all or none.

    On PostgreSQL this is one statement (each INSERT but the last in a ``WITH`` clause: one
    round trip, atomic on its own, no transaction needed around it) while its parameters
    fit the protocol's limit; elsewhere, and beyond that, one INSERT per table (or per
    chunk of a large one, see ``insert``) in a transaction (the caller's, if it runs in
    one). Foreign keys between the rows are fine: Django declares them deferrable, checked
    at the end of the transaction.
    """
    db = _db()
    tables = [(model, rows) for model, rows in tables if rows]
    statements = [
        statement for model, rows in tables for statement in _insert_statements(model, rows, db)
    ]
    params = [param for _sql, values in statements for param in values]
    if db.vendor != "postgresql" or len(statements) < 2 or len(params) > _POSTGRESQL_MAX_PARAMS:
        # Inside a caller's transaction: part of it.
        with transaction.atomic(savepoint=False):
            for sql, values in statements:
                _execute(db, sql, values)
        return
    *first, (last, _values) = statements
    clauses = ", ".join(f"{_quoted(f'w{n}')} AS ({sql})" for n, (sql, _) in enumerate(first))
    _execute(db, f"WITH {clauses} {last}", params)


def update(model: type[models.Model], values: Mapping[str, Any], where: Mapping[str, Any]) -> int:
    """``UPDATE … SET values WHERE where``; return how many rows matched.

    ``where`` maps field names to the value each must equal; ``None`` means ``IS NULL``.
    """
    db = _db()
    nulls = frozenset(name for name, value in where.items() if value is None)
    sql = _update_sql(model, tuple(values), tuple(where), nulls, db.vendor)
    with db.cursor() as cursor:
        cursor.execute(sql, _update_params(model, values, where, nulls, db))
        return int(cursor.rowcount)


def _update_params(
    model: type[models.Model],
    values: Mapping[str, Any],
    where: Mapping[str, Any],
    nulls: frozenset[str],
    db: BaseDatabaseWrapper,
) -> list[Any]:
    params = [_field(model, name).get_db_prep_save(value, db) for name, value in values.items()]
    params += [
        _field(model, name).get_db_prep_value(value, db, prepared=False)
        for name, value in where.items()
        if name not in nulls
    ]
    return params


def update_then_insert(
    model: type[models.Model],
    values: Mapping[str, Any],
    where: Mapping[str, Any],
    then: Sequence[tuple[type[models.Model], Mapping[str, Any]]],
) -> int:
    """``update()`` one row, and INSERT the rows ``then`` names (a row per table) only if
    the update matched; return how many rows the update matched.

    On PostgreSQL one statement (``WITH "w0" AS (UPDATE … RETURNING 1), "w1" AS (INSERT …
    SELECT … FROM "w0") INSERT … SELECT … FROM "w0"``); elsewhere the statements one by
    one, the INSERTs run only when the update matched.
    """
    db = _db()
    if db.vendor != "postgresql":
        matched = update(model, values, where)
        if matched:
            for into, row in then:
                insert(into, [row])
        return matched
    nulls = frozenset(name for name, value in where.items() if value is None)
    shape = tuple((into, tuple(row)) for into, row in then)
    sql = _update_then_insert_sql(model, tuple(values), tuple(where), nulls, shape)
    params = _update_params(model, values, where, nulls, db)
    for (into, names), (_into, row) in zip(shape, then, strict=True):
        params += _row_params(_insert_fields(into, names), row, db)
    with db.cursor() as cursor:
        cursor.execute(sql, params)
        return int(cursor.rowcount)


def update_each(
    model: type[models.Model],
    values: Mapping[str, Any],
    where: Mapping[str, Any],
    pks: Sequence[Any],
) -> set[Any]:
    """``update()`` the rows whose primary key is in ``pks`` (and that match ``where``),
    all with the same ``values``; return the primary keys of those it matched.

    On PostgreSQL one statement (``… WHERE pk = ANY(%s) … RETURNING pk``); elsewhere one
    ``update()`` per row.
    """
    pk = model._meta.pk
    assert pk is not None
    if not pks:
        return set()
    db = _db()
    if db.vendor != "postgresql":
        return {key for key in pks if update(model, values, {pk.name: key, **where})}
    nulls = frozenset(name for name, value in where.items() if value is None)
    sql = _update_each_sql(model, tuple(values), tuple(where), nulls)
    params = _update_params(model, values, where, nulls, db)
    keys = [pk.get_db_prep_value(key, db, prepared=False) for key in pks]
    return _returned_keys(db, sql, [*params, keys])


@cache
def _update_each_sql(
    model: type[models.Model],
    set_names: tuple[str, ...],
    where_names: tuple[str, ...],
    nulls: frozenset[str],
) -> str:
    pk = model._meta.pk
    assert pk is not None
    column = _quoted(pk.column)
    update_sql = _update_sql(model, set_names, (*where_names, pk.name), nulls, "postgresql")
    # The primary key's condition, last, takes the array of keys.
    return f"{update_sql.removesuffix(f'{column} = %s')}{column} = ANY({_ARRAY}) RETURNING {column}"


def update_then_insert_each(
    model: type[models.Model],
    rows: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]],
    then: Sequence[tuple[type[models.Model], Sequence[Mapping[str, Any]]]],
) -> set[Any]:
    """``update_then_insert()`` for several rows, each ``(values, where)`` with its own row
    in each of the ``then`` tables (a list per table, in the order of ``rows``); return the
    primary keys of the rows it matched.

    Every ``where`` names the primary key, and the rows name the same fields (and the same
    ``None`` s in ``where``). On PostgreSQL one statement: the rows are locked in the order
    of their primary keys first (the lock order of every transaction that writes several),
    then each is updated if its ``where`` holds, and the ``then`` rows of those inserted.
    Elsewhere one ``update_then_insert()`` per row.
    """
    assert all(len(inserted) == len(rows) for _into, inserted in then)
    if not rows:
        return set()
    pk = model._meta.pk
    assert pk is not None
    db = _db()
    if db.vendor != "postgresql":
        return {
            where[pk.name]
            for n, (values, where) in enumerate(rows)
            if update_then_insert(
                model, values, where, then=[(into, inserted[n]) for into, inserted in then]
            )
        }
    values, where = rows[0]
    nulls = frozenset(name for name, value in where.items() if value is None)
    set_names, where_names = tuple(values), tuple(where)
    shape = tuple((into, tuple(inserted[0])) for into, inserted in then)
    sql = _update_then_insert_each_sql(model, set_names, where_names, nulls, shape)
    assert all((tuple(values), tuple(where)) == (set_names, where_names) for values, where in rows)
    # One array per column: the statement's text is the same whatever the number of rows.
    columns = [
        _column(_array_prep(_field(model, name)), [values[name] for values, _ in rows], db)
        for name in set_names
    ]
    columns += [
        _column(
            _array_prep(_field(model, name), where=True), [where[name] for _, where in rows], db
        )
        for name in where_names
        if name not in nulls
    ]
    for (into, names), (_same, inserted) in zip(shape, then, strict=True):
        assert all(tuple(row) == names for row in inserted)
        columns += _inserted_columns(_insert_fields(into, names), inserted, db)
    return _returned_keys(db, sql, columns)


@cache
def _update_then_insert_each_sql(
    model: type[models.Model],
    set_names: tuple[str, ...],
    where_names: tuple[str, ...],
    nulls: frozenset[str],
    then: tuple[tuple[type[models.Model], tuple[str, ...]], ...],
) -> str:
    """PostgreSQL: ``WITH "v" AS (the rows: an array per column, unnested), "l" AS (lock
    them in key order), "w0" AS (UPDATE … FROM "v" … RETURNING pk), "w1" … AS (INSERT the
    ``then`` rows of those "w0" updated) SELECT pk FROM "w0"``."""
    pk = model._meta.pk
    assert pk is not None
    table, key = _quoted(model._meta.db_table), _quoted(pk.column)
    set_fields = [_field(model, name) for name in set_names]
    where_fields = [_field(model, name) for name in where_names if name not in nulls]
    insert_fields = [_insert_fields(into, names) for into, names in then]
    every = [*set_fields, *where_fields, *(f for fields in insert_fields for f in fields)]
    names = [_quoted(f"c{n}") for n in range(len(every))]
    set_columns = names[: len(set_fields)]
    where_columns = names[len(set_fields) : len(set_fields) + len(where_fields)]
    arrays = ", ".join(f"CAST({_ARRAY} AS {field.db_type(connection)}[])" for field in every)
    sets = ", ".join(
        f"{_quoted(field.column)} = v.{name}"
        for field, name in zip(set_fields, set_columns, strict=True)
    )
    conditions = [
        f"i.{_quoted(field.column)} = v.{name}"
        for field, name in zip(where_fields, where_columns, strict=True)
    ]
    conditions += [f"i.{_quoted(_field(model, name).column)} IS NULL" for name in sorted(nulls)]
    # Arrays, not IN (subquery): probed down the primary key, where a semi-join may read the
    # whole table (a hash of 100 keys against a scan of every row, cheaper on paper at
    # tens of thousands of rows). The locked keys' array is built before the update reads
    # a row: every row is locked, in key order, before any is written.
    conditions.append(f'i.{key} = ANY(ARRAY(SELECT {key} FROM "l"))')
    by_key = where_columns[[field.primary_key for field in where_fields].index(True)]
    inserts = []
    start = len(set_fields) + len(where_fields)
    for n, ((into, _names), fields) in enumerate(zip(then, insert_fields, strict=True), start=1):
        inserted = ", ".join(_quoted(field.column) for field in fields)
        selected = ", ".join(f"v.{name}" for name in names[start : start + len(fields)])
        start += len(fields)
        inserts.append(
            f'"w{n}" AS (INSERT INTO {_quoted(into._meta.db_table)} ({inserted}) '
            f'SELECT {selected} FROM "v" JOIN "w0" ON "w0".{key} = v.{by_key})'
        )
    return (
        f'WITH "v" AS (SELECT * FROM unnest({arrays}) AS v({", ".join(names)})), '
        f'"l" AS MATERIALIZED (SELECT {key} FROM {table} WHERE {key} = '
        f'ANY(ARRAY(SELECT {by_key} FROM "v")) ORDER BY {key} FOR UPDATE), '
        f'"w0" AS (UPDATE {table} AS i SET {sets} FROM "v" WHERE {" AND ".join(conditions)} '
        f"RETURNING i.{key}), "
        f"{', '.join(inserts)} "
        f'SELECT {key} FROM "w0"'
    )


@cache
def _update_then_insert_sql(
    model: type[models.Model],
    set_names: tuple[str, ...],
    where_names: tuple[str, ...],
    nulls: frozenset[str],
    then: tuple[tuple[type[models.Model], tuple[str, ...]], ...],
) -> str:
    """PostgreSQL's ``WITH "w0" AS (UPDATE … RETURNING 1), "w1" AS (INSERT … SELECT … FROM
    "w0") … INSERT … SELECT … FROM "w0"``: the last INSERT's count is the update's."""
    update_sql = _update_sql(model, set_names, where_names, nulls, "postgresql")
    inserts = []
    for into, names in then:
        fields = _insert_fields(into, names)
        columns = ", ".join(_quoted(field.column) for field in fields)
        # Each value typed as its column: INSERT … SELECT resolves untyped parameters as text.
        selected = ", ".join(f"CAST(%s AS {field.db_type(connection)})" for field in fields)
        inserts.append(
            f'INSERT INTO {_quoted(into._meta.db_table)} ({columns}) SELECT {selected} FROM "w0"'
        )
    *first, last = inserts
    clauses = [f'"w0" AS ({update_sql} RETURNING 1)']
    clauses += [f'"w{n}" AS ({insert})' for n, insert in enumerate(first, start=1)]
    return f"WITH {', '.join(clauses)} {last}"


def select_one(
    sql: str, params: Sequence[Any], columns: Sequence[tuple[type[models.Model], str] | None]
) -> tuple[Any, ...] | None:
    """Run a query for at most one row; return it with its columns converted as the ORM
    would convert them (``columns`` names, in order, the model field each selected column
    holds; ``None`` for a column that is returned as the driver gives it)."""
    db = _db()
    with db.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return None
    converters = _converters(tuple(columns), db.vendor)
    return tuple(_convert(value, pairs, db) for value, pairs in zip(row, converters, strict=True))


def select(
    sql: str, params: Sequence[Any], columns: Sequence[tuple[type[models.Model], str] | None]
) -> list[tuple[Any, ...]]:
    """``select_one()`` for every row the query returns (its arrays, of :func:`among`,
    bound in binary)."""
    db = _db()
    cursor, statement = _cursor_for(db, sql)
    with cursor:
        cursor.execute(statement, params)
        rows = cursor.fetchall()
    converters = _converters(tuple(columns), db.vendor)
    if not any(converters):
        return [tuple(row) for row in rows]
    return [
        tuple(_convert(value, pairs, db) for value, pairs in zip(row, converters, strict=True))
        for row in rows
    ]


def among(
    column: str, model: type[models.Model], name: str, values: Collection[Any]
) -> tuple[str, list[Any]]:
    """The condition "``column`` (which holds the field ``name`` of ``model``) is one of
    ``values``", and its parameters, bound as the ORM binds them, for :func:`select`.

    On PostgreSQL ``= ANY`` of one array (the statement's text and parameters the same for
    any number of values, none quoted in Python); elsewhere ``IN`` and a placeholder each.
    No values: a condition that no row meets.
    """
    if not values:
        return "1 = 0", []
    db = _db()
    field = _field(model, name)
    if db.vendor == "postgresql":
        array = _column(_array_prep(field, where=True), list(values), db)
        return f"{column} = ANY(CAST({_ARRAY} AS {field.db_type(db)}[]))", [array]
    placeholders = ", ".join(["%s"] * len(values))
    return f"{column} IN ({placeholders})", _column(_where_prep(field), list(values), db)


M = TypeVar("M", bound=models.Model)


def loaded(
    model: type[M],
    rows: Iterable[Sequence[Any]],
    db: str = DEFAULT_DB_ALIAS,
    names: Sequence[str] | None = None,
) -> list[M]:
    """Instances of ``model`` for ``rows`` read from the database ``db``, each holding the
    fields ``names`` (attnames; default: every concrete field, in order), converted as the
    ORM converts them (``values_list``, ``select``).

    Built the way unpickling builds an instance, with no ``__init__`` per row: the ORM's
    own loading costs twice as much per row as reading the values, for a pass's whole batch.
    A field left out is deferred, as with ``only()``: read when first used.
    ``pre_init``/``post_init`` are not sent (no receiver of bsft_saga's models needs them;
    the ORM's queries elsewhere send them as usual).
    """
    names = attnames(model) if names is None else tuple(names)
    found = []
    new = model.__new__
    for values in rows:
        instance = new(model)
        instance.__dict__.update(zip(names, values, strict=True))
        state = instance._state = ModelState()
        state.adding, state.db = False, db
        found.append(instance)
    return found


@cache
def attnames(model: type[models.Model]) -> tuple[str, ...]:
    """Every concrete field's ``attname``, in the order :func:`loaded` takes them."""
    return tuple(field.attname for field in model._meta.concrete_fields)


def _convert(value: Any, converters: tuple[tuple[Any, Any], ...], db: BaseDatabaseWrapper) -> Any:
    for converter, expression in converters:
        value = converter(value, expression, db)
    return value


@cache
def _converters(
    columns: tuple[tuple[type[models.Model], str] | None, ...], vendor: str
) -> tuple[tuple[tuple[Any, Any], ...], ...]:
    """Per column, the (converter, expression) pairs a compiled query would apply."""
    result: list[tuple[tuple[Any, Any], ...]] = []
    for column in columns:
        if column is None:
            result.append(())
            continue
        model, name = column
        field = _field(model, name)
        col = field.get_col(model._meta.db_table)
        found = connection.ops.get_db_converters(col) + field.get_db_converters(connection)
        result.append(tuple((converter, col) for converter in found))
    return tuple(result)


@cache
def _field(model: type[models.Model], name: str) -> Field[Any, Any]:
    field = model._meta.get_field(name)
    assert isinstance(field, Field), f"{model.__name__}.{name} is not a concrete field"
    return field


@cache
def _insert_fields(
    model: type[models.Model], names: tuple[str, ...]
) -> tuple[Field[Any, Any], ...]:
    """Every concrete field the rows name, and every other one but those the database fills
    as the ORM would: an auto-incremented primary key, and a nullable column whose default
    is NULL (left out of the INSERT, it is NULL too)."""
    return tuple(
        field
        for field in model._meta.concrete_fields
        if field.name in names or not _filled_by_the_database(field)
    )


def _filled_by_the_database(field: Field[Any, Any]) -> bool:
    # Each value left out is a parameter fewer: psycopg parses a statement of more than 50
    # parameters again on every execution instead of caching it, which cost a saga's
    # creation (its instance, inbox, timer and journal rows in one statement) a tenth of
    # its time.
    if isinstance(field, models.AutoField):
        return True
    return (
        field.null
        and field.db_default is NOT_PROVIDED
        and (not field.has_default() or field.default is None)
    )


def _quoted(name: str | None) -> str:
    return str(connection.ops.quote_name(str(name)))


@lru_cache(maxsize=256)  # bounded twice: ``count`` takes few values (``_chunk_counts``)
def _insert_sql(model: type[models.Model], names: tuple[str, ...], count: int, vendor: str) -> str:
    fields = _insert_fields(model, names)
    columns = ", ".join(_quoted(field.column) for field in fields)
    row = "(" + ", ".join(["%s"] * len(fields)) + ")"
    rows = ", ".join([row] * count)
    return f"INSERT INTO {_quoted(model._meta.db_table)} ({columns}) VALUES {rows}"


@cache
def _insert_unnest_sql(model: type[models.Model], names: tuple[str, ...]) -> str:
    """PostgreSQL: ``INSERT … SELECT * FROM unnest(CAST(%b AS <column type>[]), …)``."""
    fields = _insert_fields(model, names)
    columns = ", ".join(_quoted(field.column) for field in fields)
    arrays = ", ".join(f"CAST({_ARRAY} AS {field.db_type(connection)}[])" for field in fields)
    return f"INSERT INTO {_quoted(model._meta.db_table)} ({columns}) SELECT * FROM unnest({arrays})"


@cache
def _update_sql(
    model: type[models.Model],
    set_names: tuple[str, ...],
    where_names: tuple[str, ...],
    nulls: frozenset[str],
    vendor: str,
) -> str:
    def column(name: str) -> str:
        return _quoted(_field(model, name).column)

    assignments = ", ".join(f"{column(name)} = %s" for name in set_names)
    conditions = " AND ".join(
        f"{column(name)} IS NULL" if name in nulls else f"{column(name)} = %s"
        for name in where_names
    )
    return f"UPDATE {_quoted(model._meta.db_table)} SET {assignments} WHERE {conditions}"
