"""The rows each benchmark starts from, and the checks that the work measured was done.

**Workload W** is N ``CountingFlow`` sagas (tests/testapp/load_flows.py) just after their
start step, each with one pending ``wake`` timer that is due now. Firing a timer wakes
step 2 of its saga, which counts: the instance row gets the new state (count 1), step 2 and
version 2, an inbox row records the timer's message id, and the timer is retired as fired.

Setting W up is not measured, and publishing N start events would take longer than draining
them, so the rows are **cloned**: one start event is published through the engine, and its
rows (instance, inbox entry, timer) are copied N times by one ``INSERT … SELECT
generate_series`` per table, each copy with its own ids and its own correlation key. Every
other column is the engine's own value, so the copies have exactly the shape the engine
writes, whatever columns the library adds while it is being tuned.

The poll's tables are the same clones, with all but a batch of the timers moved a day or
more into the future. On SQLite (the embedded default's drain figure) the same clones are
made in Python and written with ``bulk_create`` (``write_anywhere``), and so on MariaDB.

Two more backlogs are cloned the same way. **W2**: ``NoticeFlow`` sagas
(tests/testapp/dispatch_flows.py), each with two due timers, "reminder" and "final-notice",
fallen due at random instants of the last ten minutes (a saga with two due timers after an
outage); firing each wakes the next step, which notes its name. **Invoices**:
``InvoiceFlow`` sagas, each with its due "reminder", whose event wakes the saga and is
also "mailed" by a plain receiver in the dispatcher child (bench/child.py).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection, models
from django.db.models import Exists, OuterRef

from bsft_saga import SagaFlow, clock, publish
from bsft_saga.models import SagaInboxEntry, SagaInstance, SagaTimeout, TimeoutOutcome
from bsft_saga.timeouts.channel import TIMERS
from tests.testapp.dispatch_events import InvoiceSent, NoticeOpened
from tests.testapp.dispatch_flows import NOTICE_TIMERS, InvoiceFlow, NoticeFlow
from tests.testapp.load_events import BenchReminderRequested, CountStarted
from tests.testapp.load_flows import BenchReminderFlow, CountingFlow

TEMPLATE_KEY = "bench-template-key"  # appears in no other column of the template's rows
STEP_NOTE = "benchmarked"  # what the step benchmark's start step stores in the state


class WorkloadError(AssertionError):
    """The rows are not what the benchmark set out to measure: no number is reported."""


# -- the drain backlogs -----------------------------------------------------------------------


@dataclass(frozen=True)
class Backlog:
    """Sagas just after their start step, each with due timers: what a drain run starts from."""

    flow: type[SagaFlow]
    start: Callable[[str], Any]  # the start event of the saga keyed so
    timers_per_saga: int
    #: What every saga shows once each of its timers fired exactly once (a queryset filter).
    woken: dict[str, Any]
    #: The clones' ``due_at`` (an SQL expression over ``t`` and ``k.n``); None: the template's.
    timer_due_at: str | None = None

    def sagas(self, timers: int) -> int:
        """How many sagas hold ``timers`` due timers (rounded down to whole sagas)."""
        return timers // self.timers_per_saga

    def timers(self, timers: int) -> int:
        """How many due timers a backlog written for ``timers`` holds."""
        return self.sagas(timers) * self.timers_per_saga


#: Workload W: one due timer per saga; firing it counts.
REMINDERS = Backlog(
    CountingFlow, CountStarted, 1, woken={"step_index": 2, "version": 2, "state__count": 1}
)
#: Workload W2: two timers per saga, fallen due at random instants of the last ten minutes.
NOTICES = Backlog(
    NoticeFlow,
    NoticeOpened,
    len(NOTICE_TIMERS),
    woken={"step_index": 3, "version": 3, "state__fired__contains": list(NOTICE_TIMERS)},
    timer_due_at="t.due_at - random() * interval '10 minutes'",
)
#: Invoices whose reminder is due: it wakes the saga, and a receiver of the child mails it.
INVOICES = Backlog(
    InvoiceFlow, InvoiceSent, 1, woken={"step_index": 2, "version": 2, "state__reminded": 1}
)


def write(backlog: Backlog, timers: int, *, timer_due_at: str | None = None) -> None:
    """Write ``backlog`` with ``timers`` due timers (``timer_due_at``: instead of its own).

    One start event is published through the engine and its saga cloned; the template is
    deleted afterwards. Random instants come from a fixed seed: every run gets the same.
    On another database than PostgreSQL (MariaDB's drain figures) the clones are made by
    ``write_anywhere``, which keeps the template's ``due_at``.
    """
    due_at = timer_due_at or backlog.timer_due_at
    if connection.vendor != "postgresql":
        if due_at is not None:  # an SQL expression of PostgreSQL's
            raise WorkloadError(f"{backlog.flow.__name__}: due_at {due_at!r} needs PostgreSQL")
        write_anywhere(backlog, timers)
        return
    template = publish(backlog.start(TEMPLATE_KEY))
    saga_id = SagaInboxEntry.objects.get(message_id=template.message_id).saga_id
    with connection.cursor() as cursor:
        cursor.execute("SELECT setseed(0.25)")
    clone_saga(saga_id, backlog.sagas(timers), prefix="w-", timer_due_at=due_at)
    SagaInstance.objects.filter(pk=saga_id).delete()


#: The stored trace context of a timer scheduled under a traced request (a sampled span).
TRACE_CONTEXT = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}


def store_trace_context(backlog: Backlog) -> None:
    """Give every timer of ``backlog`` the trace context a traced request would have stored
    (one statement, untimed)."""
    SagaTimeout.objects.filter(saga__saga_type=backlog.flow.saga_type).update(
        trace_context=TRACE_CONTEXT
    )


def write_anywhere(backlog: Backlog, timers: int) -> None:
    """``write()`` on any backend: the template's rows copied in Python, one per saga, with
    what ``clone_saga`` changes (ids, message ids, the key in every text and JSON column)."""
    template = publish(backlog.start(TEMPLATE_KEY))
    saga_id = SagaInboxEntry.objects.get(message_id=template.message_id).saga_id
    keys = [f"w-{n:07d}" for n in range(1, backlog.sagas(timers) + 1)]
    tables: tuple[tuple[type[models.Model], str], ...] = (
        (SagaInstance, "id"),
        (SagaInboxEntry, "saga_id"),
        (SagaTimeout, "saga_id"),
    )
    for model, fk in tables:
        rows = list(model._default_manager.filter(**{fk: saga_id}).values())
        copies: list[Any] = []
        for key in keys:
            # Derived from the key as clone_saga's, with the version bits MariaDB's uuid
            # column insists on.
            new_id = uuid.UUID(hashlib.md5(key.encode()).hexdigest(), version=4)
            for row in rows:
                copy = {name: _with_key(value, key) for name, value in row.items()}
                copy[fk] = new_id
                if model is not SagaInstance:
                    del copy["id"]  # the sequence numbers the copies
                    copy["message_id"] = uuid.uuid4()
                copies.append(model(**copy))
        model._default_manager.bulk_create(copies, batch_size=500)
    SagaInstance.objects.filter(pk=saga_id).delete()


def _with_key(value: Any, key: str) -> Any:
    if isinstance(value, str):
        return value.replace(TEMPLATE_KEY, key)
    if isinstance(value, dict | list):
        return json.loads(json.dumps(value).replace(TEMPLATE_KEY, key))
    return value


def check_due(backlog: Backlog, timers: int, *, due: int | None = None) -> None:
    """Raise ``WorkloadError`` unless ``backlog`` is in place for ``timers``: its sagas,
    their pending timers, ``due`` (default all) of them claimable now."""
    n = backlog.timers(timers)
    sagas = SagaInstance.objects.filter(saga_type=backlog.flow.saga_type).count()
    pending = SagaTimeout.objects.pending().count()
    claimable = TIMERS.claimable(clock.now()).count()
    expected = (backlog.sagas(timers), n, n if due is None else due)
    if (sagas, pending, claimable) != expected:
        raise WorkloadError(
            f"{backlog.flow.__name__} backlog: expected (sagas, pending timers, claimable) = "
            f"{expected}, found {(sagas, pending, claimable)}"
        )


def check_fired(backlog: Backlog, timers: int) -> None:
    """Raise ``WorkloadError`` unless every timer of ``backlog`` fired exactly once.

    Run after every drain, the library's and the hand-written one alike: each saga shows
    ``backlog.woken`` (each of its steps ran once), each timer is fired with its message
    id in its saga's inbox, and the inbox holds the start and one row per timer, so that a
    fast run cannot be a run that skipped work.
    """
    n, s = backlog.timers(timers), backlog.sagas(timers)
    sagas = SagaInstance.objects.filter(saga_type=backlog.flow.saga_type)
    timer_rows = SagaTimeout.objects.filter(saga__saga_type=backlog.flow.saga_type)
    recorded = SagaInboxEntry.objects.filter(
        saga_id=OuterRef("saga_id"), message_id=OuterRef("message_id")
    )
    found = {
        "sagas": sagas.count(),
        "sagas woken once by each timer": sagas.filter(**backlog.woken).count(),
        "timers fired": timer_rows.filter(outcome=TimeoutOutcome.FIRED, dispatched_at__isnull=False)
        .filter(Exists(recorded))
        .count(),
        "inbox rows": SagaInboxEntry.objects.filter(saga__in=sagas).count(),
    }
    expected = {
        "sagas": s,
        "sagas woken once by each timer": s,
        "timers fired": n,
        "inbox rows": s + n,
    }
    if found != expected:
        raise WorkloadError(f"after the drain: expected {expected}, found {found}")


def write_due_reminders(n: int, *, not_due_after: int | None = None) -> None:
    """Write workload W: ``n`` counting sagas, each with one due ``wake`` timer.

    ``not_due_after=k``: only the first ``k`` timers (in claim order) are due; the others
    become due a day from now and later, one a second (the poll's table).
    """
    due_at = None
    if not_due_after is not None:
        due_at = (
            f"CASE WHEN k.n <= {int(not_due_after)} THEN t.due_at "
            "ELSE t.due_at + interval '1 day' + k.n * interval '1 second' END"
        )
    write(REMINDERS, n, timer_due_at=due_at)


def clone_saga(saga_id: uuid.UUID, n: int, *, prefix: str, timer_due_at: str | None) -> None:
    """Copy the rows of saga ``saga_id`` ``n`` times, keyed ``<prefix>0000001`` and on.

    Per copy: the instance id is derived from the new key (so the copied inbox and timer
    rows can point at it without a join), message ids are new, and every text or JSON
    column has the template's key replaced by the new one. Auto-incremented ids are left to
    their sequence. The timer copies keep the template's ``due_at`` (so they are claimed in
    id order, oldest first) unless ``timer_due_at`` (an SQL expression over ``t`` and
    ``k.n``) says otherwise.
    """
    new_id = "md5(k.key)::uuid"
    for model, fk, overrides in (
        (SagaInstance, "id", {"id": new_id}),
        (SagaInboxEntry, "saga_id", {"saga_id": new_id, "message_id": "gen_random_uuid()"}),
        (
            SagaTimeout,
            "saga_id",
            {
                "saga_id": new_id,
                "message_id": "gen_random_uuid()",
                **({"due_at": timer_due_at} if timer_due_at else {}),
            },
        ),
    ):
        columns, expressions = _copy_expressions(model, overrides)
        table = connection.ops.quote_name(model._meta.db_table)
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} ({', '.join(columns)}) "
                f"SELECT {', '.join(expressions)} FROM {table} AS t CROSS JOIN ("
                "  SELECT n, %(prefix)s || lpad(n::text, 7, '0') AS key"
                "  FROM generate_series(1, %(n)s) AS n"
                f") AS k WHERE t.{connection.ops.quote_name(fk)} = %(saga_id)s "
                "ORDER BY k.n",
                {"prefix": prefix, "n": n, "saga_id": saga_id, "template": TEMPLATE_KEY},
            )


def _copy_expressions(
    model: type[models.Model], overrides: dict[str, str]
) -> tuple[list[str], list[str]]:
    quote = connection.ops.quote_name
    columns, expressions = [], []
    for field in model._meta.concrete_fields:
        if isinstance(field, models.AutoField):
            continue  # BigAutoField too: the sequence numbers the copies
        column = field.column
        assert column is not None  # a concrete field has a column
        if column in overrides:
            expression = overrides[column]
        elif isinstance(field, models.CharField | models.TextField):
            expression = f"replace(t.{quote(column)}, %(template)s, k.key)"
        elif isinstance(field, models.JSONField):
            expression = f"replace(t.{quote(column)}::text, %(template)s, k.key)::jsonb"
        else:
            expression = f"t.{quote(column)}"
        columns.append(quote(column))
        expressions.append(expression)
    return columns, expressions


def check_due_reminders(n: int, *, due: int | None = None) -> None:
    """Raise ``WorkloadError`` unless W is in place: ``n`` sagas, ``due`` (default all) of
    their timers claimable now."""
    check_due(REMINDERS, n, due=due)


def check_reminders_fired(n: int) -> None:
    """Raise ``WorkloadError`` unless each of the ``n`` sagas of W was woken exactly once
    (count 1, step 2, version 2, the timer fired, its message id in the saga's inbox)."""
    check_fired(REMINDERS, n)


# -- the step benchmark -----------------------------------------------------------------------


def start_event(key: str) -> BenchReminderRequested:
    return BenchReminderRequested(key, note=STEP_NOTE)


def check_started(n: int) -> None:
    """Raise ``WorkloadError`` unless ``n`` step-benchmark sagas each wrote their three rows."""
    sagas = SagaInstance.objects.filter(saga_type=BenchReminderFlow.saga_type)
    found = (
        sagas.filter(step_index=1, state__note=STEP_NOTE).count(),
        SagaInboxEntry.objects.filter(saga__in=sagas).count(),
        SagaTimeout.objects.pending().filter(saga__in=sagas, due_at__gt=clock.now()).count(),
    )
    if found != (n, n, n):
        raise WorkloadError(
            f"step run: expected {n} instances, inbox rows and pending timers, found {found}"
        )


def rows_of(saga_id: uuid.UUID) -> dict[str, list[dict[str, Any]]]:
    """The rows of one saga, per table, without what must differ between two sagas that did
    the same: ids, message ids, the key (shown as ``<key>``) and a fresh correlation id
    (shown as ``<fresh>``); times are relative to the saga's creation."""
    instance = SagaInstance.objects.filter(pk=saga_id).values().get()
    key, created = instance["correlation_key"], instance["created_at"]

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: ("<fresh>" if k == "correlation_id" and v else strip(v))
                for k, v in value.items()
                if k not in _IDS
            }
        if isinstance(value, str):
            return value.replace(key, "<key>")
        if isinstance(value, datetime):
            return value - created
        return value

    return {
        "instance": [strip(instance)],
        "inbox": [strip(r) for r in SagaInboxEntry.objects.filter(saga_id=saga_id).values()],
        "timer": [strip(r) for r in SagaTimeout.objects.filter(saga_id=saga_id).values()],
    }


_IDS = {"id", "saga_id", "message_id"}


def differences(
    ours: dict[str, list[dict[str, Any]]], engine: dict[str, list[dict[str, Any]]]
) -> list[str]:
    """What differs between two ``rows_of`` results, one line per column."""
    found = []
    for table, rows in engine.items():
        if len(ours[table]) != len(rows):
            found.append(f"{table}: {len(ours[table])} rows, the engine wrote {len(rows)}")
            continue
        for mine, theirs in zip(ours[table], rows, strict=True):
            for column in sorted(mine.keys() | theirs.keys()):
                if mine.get(column) != theirs.get(column):
                    found.append(
                        f"{table}.{column}: {mine.get(column)!r}, "
                        f"the engine wrote {theirs.get(column)!r}"
                    )
    return found
