"""What a careful team would write by hand instead of using bsft_saga: the baselines.

The first two do the same transactional work as the library, on the same tables and
indexes, in plain Django ORM, and nothing else. What they leave out is what the ratios price in: no
routing of events to flows, no step guard, no inbox check before the write (the unique
constraint would refuse a duplicate), no catch-up policy, no claim lease (a crash simply
releases the row locks), no attempt counting, back-off or dead-lettering, no signal
receivers or telemetry (the one correlation id it writes is a fresh one, as the engine
writes). A production loop would need most of these; the baselines are the fastest honest
version of the work written with the ORM, not a straw man.

The third, :class:`RawBatch`, is the ceiling rather than a rival: psycopg 3 without Django,
writing for each fired reminder the rows and statements the library writes (the saga's
version-checked update with its inbox row in one statement, then the stamp), for a batch
claimed by one ``SKIP LOCKED`` poll and committed once. It pays no Python for envelopes,
codecs, signals or model instances, and its statements are prepared by psycopg after their
fifth use: what is left between the library and it is the price of everything the library
does for each timer.

:class:`RawRowStart` is the same ceiling for start events: psycopg 3, per event the three
single-row ``INSERT`` s ``start_by_hand`` makes, and a commit.

The last two, :class:`RawSetDrain` and :class:`RawSetStart`, are what a PostgreSQL expert
would write for the same rows, psycopg 3 without Django: a statement per table and per
batch instead of a statement per row (a version-checked ``UPDATE … FROM unnest(…)`` of all
the batch's sagas, one ``INSERT … SELECT … FROM unnest(…)`` per table), so that a batch
costs a handful of round trips whatever its size. Nothing in them could be left out and
still write the same rows: they are the database's real limit for this work, the fair
ceiling for a library that must also route, guard, retry and tell.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Self

import psycopg
from django.db import connection, models, transaction
from django.utils import timezone
from psycopg.types.json import Jsonb

from bsft_saga.models import SagaInboxEntry, SagaInstance, SagaTimeout, TimeoutOutcome
from tests.testapp.load_flows import (
    BENCH_REMINDER_DELAY,
    BENCH_REMINDER_TIMER,
    BenchReminderFlow,
    BenchReminderState,
)

# Constants a hand-written version would spell out once.
_SAGA_TYPE = BenchReminderFlow.saga_type
_STATE_TYPE = f"{BenchReminderState.__module__}.{BenchReminderState.__qualname__}"
_START_EVENT_TYPE = "tests.load.bench-reminder-requested"
_REMINDER_EVENT_TYPE = "tests.load.bench-reminder-due"


def start_by_hand(key: str, note: str) -> None:
    """Write what publishing the start event writes: the instance, its inbox row and one
    pending reminder, in one ``transaction.atomic()`` (three INSERTs, one commit)."""
    now = timezone.now()
    with transaction.atomic():
        saga = SagaInstance.objects.create(
            saga_type=_SAGA_TYPE,
            correlation_key=key,
            state_type=_STATE_TYPE,
            state={"note": note},
            step_index=1,
            created_at=now,
            updated_at=now,
            version=1,
        )
        SagaInboxEntry.objects.create(
            saga=saga, message_id=uuid.uuid4(), event_type=_START_EVENT_TYPE, handled_at=now
        )
        SagaTimeout.objects.create(
            saga=saga,
            name=BENCH_REMINDER_TIMER,
            due_at=now + BENCH_REMINDER_DELAY,
            event_type=_REMINDER_EVENT_TYPE,
            payload={"request_id": key},
            correlation_id=uuid.uuid4().hex,
            scheduled_step_index=1,
            scheduled_at=now,
        )


def fire_one_by_hand() -> bool:
    """Fire the oldest due reminder in one ``transaction.atomic()``; False when none is due.

    ``SELECT … FOR UPDATE SKIP LOCKED`` of the oldest due pending timer (the partial
    ``(due_at, id)`` index serves it), lock and load its saga, write the new state (count
    + 1), step, version and ``updated_at``, insert the inbox row with the timer's message
    id, stamp the timer fired: five statements and one commit per reminder. Concurrent
    loops take disjoint rows.
    """
    with transaction.atomic():
        now = timezone.now()
        timer = (
            SagaTimeout.objects.filter(dispatched_at__isnull=True, due_at__lte=now)
            .order_by("due_at", "id")
            .select_for_update(skip_locked=True)
            .first()
        )
        if timer is None:
            return False
        saga = SagaInstance.objects.select_for_update().get(pk=timer.saga_id)
        SagaInstance.objects.filter(pk=saga.pk).update(
            state={**saga.state, "count": saga.state["count"] + 1},
            step_index=saga.step_index + 1,
            version=saga.version + 1,
            updated_at=now,
        )
        SagaInboxEntry.objects.create(
            saga_id=saga.pk,
            message_id=timer.message_id,
            event_type=timer.event_type,
            handled_at=now,
        )
        SagaTimeout.objects.filter(pk=timer.pk).update(
            dispatched_at=now, outcome=TimeoutOutcome.FIRED
        )
    return True


@dataclass(frozen=True)
class _RawDrain:
    """What the raw drains share: a batch per transaction, claimed by one poll."""

    poll: str  # the oldest due pending timers, SKIP LOCKED: (id, saga_id, message_id, event_type)

    @staticmethod
    def poll_statement() -> str:
        timers = connection.ops.quote_name(SagaTimeout._meta.db_table)
        return (
            f"SELECT id, saga_id, message_id, event_type FROM {timers} "
            "WHERE dispatched_at IS NULL AND due_at <= %s ORDER BY due_at, id LIMIT %s "
            "FOR UPDATE SKIP LOCKED"
        )

    def fire_batch(self, conn: psycopg.Connection[Any], batch_size: int) -> int:
        """Fire up to ``batch_size`` due reminders in one transaction; how many it fired."""
        now = datetime.now(UTC)
        with conn.transaction():
            timers = conn.execute(self.poll, (now, batch_size)).fetchall()
            if timers:
                self.fire(conn, timers, now)
        return len(timers)

    def fire(self, conn: psycopg.Connection[Any], timers: list[Any], now: datetime) -> None:
        """Write what firing the polled ``timers`` writes, inside the batch's transaction."""
        raise NotImplementedError


@dataclass(frozen=True)
class RawBatch(_RawDrain):
    """The raw ceiling: psycopg 3 on a connection of its own, a batch per transaction.

    The statements are written once, here, from the models' table and column names (the
    only use of Django: nothing of it runs in the loop). Per batch: ``BEGIN``, the poll
    (``SELECT … FOR UPDATE SKIP LOCKED`` of the oldest due pending timers, ``LIMIT``
    ``batch_size``, down the same partial index as the hand-written loop), one ``SELECT`` of
    their sagas' state, per timer the library's two writes, ``COMMIT``. Concurrent loops take
    disjoint rows.
    """

    sagas: str
    advance: str
    stamp: str

    @classmethod
    def for_models(cls) -> RawBatch:
        quote = connection.ops.quote_name
        timers, instances = quote(SagaTimeout._meta.db_table), quote(SagaInstance._meta.db_table)
        inbox = quote(SagaInboxEntry._meta.db_table)
        return cls(
            poll=cls.poll_statement(),
            sagas=f"SELECT id, state, step_index, version FROM {instances} WHERE id = ANY(%s)",
            advance=(
                f'WITH "w0" AS (UPDATE {instances} SET version = %s, state = %s, '
                "step_index = %s, updated_at = %s, is_complete = false, completed_at = NULL "
                "WHERE id = %s AND version = %s AND is_complete = false RETURNING 1) "
                f"INSERT INTO {inbox} (saga_id, message_id, event_type, handled_at) "
                "SELECT CAST(%s AS uuid), CAST(%s AS uuid), CAST(%s AS varchar(200)), "
                'CAST(%s AS timestamp with time zone) FROM "w0"'
            ),
            stamp=(
                f"UPDATE {timers} SET dispatched_at = %s, outcome = %s, claimed_until = NULL, "
                "next_attempt_at = NULL WHERE id = %s AND dispatched_at IS NULL"
            ),
        )

    def fire(self, conn: psycopg.Connection[Any], timers: list[Any], now: datetime) -> None:
        sagas = {
            saga_id: rest for saga_id, *rest in conn.execute(self.sagas, ([t[1] for t in timers],))
        }
        for timer_id, saga_id, message_id, event_type in timers:
            state, step_index, version = sagas[saga_id]
            advanced = conn.execute(
                self.advance,
                (
                    version + 1,
                    Jsonb({**state, "count": state["count"] + 1}),
                    step_index + 1,
                    now,
                    saga_id,
                    version,
                    saga_id,
                    message_id,
                    event_type,
                    now,
                ),
            )
            if advanced.rowcount != 1:
                raise RuntimeError(f"saga {saga_id} changed under its locked timer")
            conn.execute(self.stamp, (now, TimeoutOutcome.FIRED.value, timer_id))


def connect() -> psycopg.Connection[Any]:
    """A psycopg 3 connection of the raw baselines' own (autocommit: each opens its own
    transactions) to the database Django uses, ``DATABASE_URL``."""
    return psycopg.connect(os.environ["DATABASE_URL"], autocommit=True)


def _constants(
    model: type[models.Model], given: Sequence[str]
) -> tuple[list[str], list[str], list[Any]]:
    """The columns of ``model`` a baseline leaves at their defaults: (quoted columns, the
    placeholders that bind them, each cast to its column's type, their values).

    Taken once from the model's fields (the only use of Django), as the ORM would fill them
    in, so that the raw rows stay the engine's when the library adds a column.
    """
    quote = connection.ops.quote_name
    columns, placeholders, values = [], [], []
    for field in model._meta.concrete_fields:
        column = field.column
        assert column is not None  # a concrete field has a column
        if isinstance(field, models.AutoField) or column in given:
            continue  # BigAutoField too: the identity numbers the rows
        value = field.get_default()
        columns.append(quote(column))
        placeholders.append(f"CAST(%s AS {field.db_type(connection)})")
        values.append(Jsonb(value) if isinstance(field, models.JSONField) else value)
    return columns, placeholders, values


def _insert_unnest(
    model: type[models.Model], given: dict[str, str], varying: dict[str, str]
) -> tuple[str, list[Any]]:
    """``INSERT … SELECT … FROM unnest(…)`` into ``model``'s table: one scalar parameter per
    column of ``given`` (column: an SQL expression over ``%s``), one array parameter per
    column of ``varying`` (column: its SQL array type), the model's defaults for the rest.

    Returns the statement and the defaults' values; it binds ``given``'s values, then the
    defaults, then the arrays.
    """
    quote = connection.ops.quote_name
    columns, placeholders, defaults = _constants(model, [*given, *varying])
    targets = [*(quote(c) for c in given), *columns, *(quote(c) for c in varying)]
    selected = [*given.values(), *placeholders, *(f"v.{quote(c)}" for c in varying)]
    arrays = ", ".join(f"CAST(%s AS {array})" for array in varying.values())
    statement = (
        f"INSERT INTO {quote(model._meta.db_table)} ({', '.join(targets)}) "
        f"SELECT {', '.join(selected)} "
        f"FROM unnest({arrays}) AS v({', '.join(quote(c) for c in varying)})"
    )
    return statement, defaults


@dataclass(frozen=True)
class RawSetDrain(_RawDrain):
    """The set-based ceiling of the drain: psycopg 3, a statement per table per batch.

    Per batch, in one transaction: the poll (``RawBatch``'s: ``SELECT … FOR UPDATE SKIP
    LOCKED`` of the oldest due pending timers, ``LIMIT`` ``batch_size``, down the same
    partial index), their sagas locked in ``id`` order (the library's lock order, so that
    concurrent loops cannot deadlock) and read, each saga's new state made in Python (count
    + 1 per timer, step, version), then three writes whatever the batch's size: one
    version-checked ``UPDATE … FROM unnest(…)`` of all the sagas, one ``INSERT … SELECT …
    FROM unnest(…)`` of all the inbox rows, one ``UPDATE … WHERE id = ANY(…)`` stamping all
    the timers fired. It leaves the rows ``RawBatch`` and ``fire_one_by_hand`` leave.
    """

    lock: str
    advance: str
    inbox: str
    stamp: str

    @classmethod
    def for_models(cls) -> RawSetDrain:
        quote = connection.ops.quote_name
        instances, timers = quote(SagaInstance._meta.db_table), quote(SagaTimeout._meta.db_table)
        inbox = quote(SagaInboxEntry._meta.db_table)
        return cls(
            poll=cls.poll_statement(),
            lock=(
                f"SELECT id, state, step_index, version FROM {instances} "
                "WHERE id = ANY(CAST(%s AS uuid[])) ORDER BY id FOR UPDATE"
            ),
            advance=(
                f"UPDATE {instances} AS s SET version = v.version, state = v.state, "
                "step_index = v.step_index, updated_at = %s, is_complete = false, "
                "completed_at = NULL FROM unnest(CAST(%s AS uuid[]), CAST(%s AS integer[]), "
                "CAST(%s AS integer[]), CAST(%s AS jsonb[]), CAST(%s AS integer[])) "
                "AS v(id, was, version, state, step_index) "
                "WHERE s.id = v.id AND s.version = v.was AND s.is_complete = false"
            ),
            inbox=(
                f"INSERT INTO {inbox} (saga_id, message_id, event_type, handled_at) "
                "SELECT v.saga_id, v.message_id, v.event_type, %s FROM unnest("
                "CAST(%s AS uuid[]), CAST(%s AS uuid[]), CAST(%s AS varchar(200)[])) "
                "AS v(saga_id, message_id, event_type)"
            ),
            stamp=(
                f"UPDATE {timers} SET dispatched_at = %s, outcome = %s, claimed_until = NULL, "
                "next_attempt_at = NULL "
                "WHERE id = ANY(CAST(%s AS bigint[])) AND dispatched_at IS NULL"
            ),
        )

    def fire(self, conn: psycopg.Connection[Any], timers: list[Any], now: datetime) -> None:
        locked = conn.execute(self.lock, (list({t[1] for t in timers}),)).fetchall()
        sagas = {
            saga_id: [state, step_index, version] for saga_id, state, step_index, version in locked
        }
        was = {saga_id: saga[2] for saga_id, saga in sagas.items()}
        for _timer_id, saga_id, _message_id, _event_type in timers:
            saga = sagas[saga_id]  # two timers of one saga in a batch would count twice
            saga[0] = {**saga[0], "count": saga[0]["count"] + 1}
            saga[1] += 1
            saga[2] += 1
        ids = list(sagas)
        advanced = conn.execute(
            self.advance,
            (
                now,
                ids,
                [was[i] for i in ids],
                [sagas[i][2] for i in ids],
                [Jsonb(sagas[i][0]) for i in ids],
                [sagas[i][1] for i in ids],
            ),
        )
        if advanced.rowcount != len(ids):
            raise RuntimeError("a saga changed under its locked timer")
        columns = list(zip(*timers, strict=True))
        conn.execute(self.inbox, (now, list(columns[1]), list(columns[2]), list(columns[3])))
        stamped = conn.execute(self.stamp, (now, TimeoutOutcome.FIRED.value, list(columns[0])))
        if stamped.rowcount != len(timers):
            raise RuntimeError("a timer was fired under its lock")


#: The columns the raw start baselines write, table by table, with their SQL types; every
#: other column takes the model's default. ``start_by_hand`` fills the same ones.
_START_COLUMNS: dict[type[models.Model], dict[str, str]] = {
    SagaInstance: {
        "id": "uuid",
        "saga_type": "varchar(200)",
        "correlation_key": "varchar(200)",
        "state_type": "varchar(300)",
        "state": "jsonb",
        "step_index": "integer",
        "created_at": "timestamp with time zone",
        "updated_at": "timestamp with time zone",
        "version": "integer",
    },
    SagaInboxEntry: {
        "saga_id": "uuid",
        "message_id": "uuid",
        "event_type": "varchar(200)",
        "handled_at": "timestamp with time zone",
    },
    SagaTimeout: {
        "saga_id": "uuid",
        "name": "varchar(200)",
        "due_at": "timestamp with time zone",
        "event_type": "varchar(200)",
        "payload": "jsonb",
        "message_id": "uuid",
        "correlation_id": "varchar(200)",
        "scheduled_step_index": "integer",
        "scheduled_at": "timestamp with time zone",
    },
}

#: The columns whose values differ between the events of one batch: bound as arrays by
#: ``RawSetStart``, once per batch for the others.
_VARYING = {
    SagaInstance: ("id", "correlation_key", "state"),
    SagaInboxEntry: ("saga_id", "message_id"),
    SagaTimeout: ("saga_id", "payload", "message_id", "correlation_id"),
}


@dataclass(frozen=True)
class _StartStatements:
    """The three INSERTs of a raw start baseline (instances, inbox rows, reminders), each
    with the values of the columns it leaves to the model's defaults."""

    instances: str
    instance_defaults: list[Any]
    inbox: str
    inbox_defaults: list[Any]
    timers: str
    timer_defaults: list[Any]

    @classmethod
    def _written_by(
        cls, insert: Callable[[type[models.Model], dict[str, str]], tuple[str, list[Any]]]
    ) -> Self:
        (instances, instance_defaults), (inbox, inbox_defaults), (timers, timer_defaults) = (
            insert(model, _START_COLUMNS[model]) for model in _START_COLUMNS
        )
        return cls(instances, instance_defaults, inbox, inbox_defaults, timers, timer_defaults)


@dataclass(frozen=True)
class RawSetStart(_StartStatements):
    """The set-based ceiling of the step: what ``start_by_hand`` writes for a batch of start
    events, in three ``INSERT … SELECT … FROM unnest(…)`` (the instances, their inbox rows,
    their reminders) and one commit, psycopg 3 on a connection of its own."""

    @classmethod
    def for_models(cls) -> RawSetStart:
        def insert(model: type[models.Model], columns: dict[str, str]) -> tuple[str, list[Any]]:
            varying = _VARYING[model]
            return _insert_unnest(
                model,
                {c: f"CAST(%s AS {t})" for c, t in columns.items() if c not in varying},
                {c: f"{columns[c]}[]" for c in varying},
            )

        return cls._written_by(insert)

    def start_batch(self, conn: psycopg.Connection[Any], keys: Sequence[str], note: str) -> None:
        """Write the rows of one start event per key in ``keys``, in one transaction."""
        now = datetime.now(UTC)
        ids = [uuid.uuid4() for _ in keys]
        with conn.transaction():
            conn.execute(
                self.instances,
                (
                    *(_SAGA_TYPE, _STATE_TYPE, 1, now, now, 1),
                    *self.instance_defaults,
                    *(ids, list(keys), [Jsonb({"note": note}) for _ in keys]),
                ),
            )
            conn.execute(
                self.inbox,
                (
                    *(_START_EVENT_TYPE, now),
                    *self.inbox_defaults,
                    *(ids, [uuid.uuid4() for _ in keys]),
                ),
            )
            conn.execute(
                self.timers,
                (
                    *(BENCH_REMINDER_TIMER, now + BENCH_REMINDER_DELAY, _REMINDER_EVENT_TYPE),
                    *(1, now),
                    *self.timer_defaults,
                    ids,
                    [Jsonb({"request_id": key}) for key in keys],
                    [uuid.uuid4() for _ in keys],
                    [uuid.uuid4().hex for _ in keys],
                ),
            )


def _insert_row(model: type[models.Model], given: dict[str, str]) -> tuple[str, list[Any]]:
    """``INSERT … VALUES`` of one row into ``model``'s table: the columns of ``given``
    (column: an SQL expression over ``%s``), the model's defaults for the rest.

    Returns the statement and the defaults' values; it binds ``given``'s values, then the
    defaults.
    """
    quote = connection.ops.quote_name
    columns, placeholders, defaults = _constants(model, list(given))
    targets = [*(quote(c) for c in given), *columns]
    statement = (
        f"INSERT INTO {quote(model._meta.db_table)} ({', '.join(targets)}) "
        f"VALUES ({', '.join([*given.values(), *placeholders])})"
    )
    return statement, defaults


@dataclass(frozen=True)
class RawRowStart(_StartStatements):
    """The raw ceiling of the step, a row at a time: what ``start_by_hand`` writes for one
    start event (the instance, its inbox row, its reminder: three single-row ``INSERT`` s)
    and one commit, psycopg 3 on a connection of its own, its statements prepared by
    psycopg after their fifth use. ``publish()`` commits each event too: this is the price
    of that work with no Python but the driver's."""

    @classmethod
    def for_models(cls) -> RawRowStart:
        return cls._written_by(
            lambda model, columns: _insert_row(
                model, {c: f"CAST(%s AS {t})" for c, t in columns.items()}
            )
        )

    def start(self, conn: psycopg.Connection[Any], key: str, note: str) -> None:
        """Write the rows of the start event for ``key``, in a transaction of their own."""
        now = datetime.now(UTC)
        saga_id = uuid.uuid4()
        with conn.transaction():
            conn.execute(
                self.instances,
                (
                    *(saga_id, _SAGA_TYPE, key, _STATE_TYPE, Jsonb({"note": note}), 1),
                    *(now, now, 1),
                    *self.instance_defaults,
                ),
            )
            conn.execute(
                self.inbox,
                (saga_id, uuid.uuid4(), _START_EVENT_TYPE, now, *self.inbox_defaults),
            )
            conn.execute(
                self.timers,
                (
                    *(saga_id, BENCH_REMINDER_TIMER, now + BENCH_REMINDER_DELAY),
                    *(_REMINDER_EVENT_TYPE, Jsonb({"request_id": key}), uuid.uuid4()),
                    *(uuid.uuid4().hex, 1, now),
                    *self.timer_defaults,
                ),
            )
