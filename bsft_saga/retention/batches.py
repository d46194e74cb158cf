"""Bounded deletes: at most ``batch_size`` rows per statement, never the rows in memory.

Outside a transaction every statement commits on its own, so a purge holds its row locks
for one statement at a time, and a purge that dies half-way has deleted whole batches and
can simply run again. Django's ``QuerySet.delete()`` is not used: with a cascade (or any
delete signal receiver installed) it loads every row into Python first. Children are
deleted explicitly instead, before the instances they belong to, and an instance is only
deleted once nothing refers to it.
"""

from __future__ import annotations

import operator
import uuid
from collections.abc import Callable, Sequence
from dataclasses import astuple, dataclass
from typing import Any, Self

from django.db import connections
from django.db.models import Exists, OuterRef, QuerySet

from bsft_saga.models import (
    SagaInboxEntry,
    SagaInstance,
    SagaJournalEntry,
    SagaKeptEvent,
    SagaOutboxMessage,
    SagaTimeout,
)
from bsft_saga.querysets import SagaOutboxQuerySet, SagaTimeoutQuerySet

#: Told how many rows each statement deleted, right after it (a purge's progress).
OnBatch = Callable[[int], None]

#: Rows per statement unless told otherwise: small enough that no statement holds its
#: locks for long, large enough that a million rows take a thousand statements.
DEFAULT_BATCH_SIZE = 1000


@dataclass(frozen=True)
class DeletedRows:
    """How many rows of each saga table a deletion removed (or would remove)."""

    instances: int = 0
    inbox: int = 0
    timeouts: int = 0
    outbox: int = 0
    kept: int = 0
    journal: int = 0

    def __add__(self, other: Self) -> Self:
        return type(self)(*map(operator.add, astuple(self), astuple(other)))


def check_batch_size(batch_size: int) -> None:
    """``ValueError`` naming ``batch_size`` unless it is a positive integer."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")


def delete_in_batches(
    rows: QuerySet[Any], batch_size: int, *, on_batch: OnBatch | None = None
) -> int:
    """Delete every row of ``rows``, ``batch_size`` per statement; return how many went.

    Each statement is ``DELETE ... WHERE <filters> AND id IN (SELECT id ... WHERE <filters>
    LIMIT batch_size)``: the filters are applied again to each row it deletes, so a row
    that changed since the statement chose it (a dead letter requeued meanwhile, say) is
    left alone. Only for tables no foreign key points to: no cascade is followed and no
    delete signal is sent. ``on_batch`` is told the count of each statement.
    """
    check_batch_size(batch_size)
    referenced_by = rows.model._meta.related_objects
    if referenced_by:
        raise TypeError(
            f"{rows.model.__name__} rows are referenced by "
            f"{', '.join(r.related_model.__name__ for r in referenced_by)}; "
            "delete those first (see delete_instances)"
        )
    if rows.query.is_empty():
        return 0  # e.g. dead letters a policy keeps: ``none()``
    deleted = 0
    # MariaDB and MySQL take no LIMIT in an IN subquery: the ids are read first there.
    sliced_subquery = connections[rows.db].features.allow_sliced_subqueries_with_in
    while True:
        chosen = rows.order_by().values_list("pk", flat=True)[:batch_size]
        batch = rows.filter(pk__in=chosen if sliced_subquery else list(chosen))
        count = batch._raw_delete(batch.db) or 0  # None: no id was left to choose
        deleted += count
        if on_batch is not None:
            on_batch(count)
        if count < batch_size:
            return deleted


def id_page_size(batch_size: int, using: str = "default") -> int:
    """How many instance ids one statement may name: ``batch_size``, within the backend's
    parameter limit (SQLite's can be 999) for a statement that names them twice."""
    limit = connections[using].features.max_query_params
    return batch_size if limit is None else max(1, min(batch_size, (limit - 10) // 2))


def delete_instances(
    ids: Sequence[uuid.UUID],
    *,
    timers: SagaTimeoutQuerySet,
    outbox: SagaOutboxQuerySet,
    batch_size: int,
    on_batch: OnBatch | None = None,
) -> DeletedRows:
    """``delete_children``, then ``delete_childless``: the instances with what may go of theirs."""
    ids = list(ids)
    children = delete_children(
        ids, timers=timers, outbox=outbox, batch_size=batch_size, on_batch=on_batch
    )
    instances = delete_childless(ids)
    if on_batch is not None:
        on_batch(instances)
    return children + DeletedRows(instances=instances)


def delete_children(
    ids: Sequence[uuid.UUID],
    *,
    timers: SagaTimeoutQuerySet,
    outbox: SagaOutboxQuerySet,
    batch_size: int,
    on_batch: OnBatch | None = None,
) -> DeletedRows:
    """Delete these instances' inbox rows, kept events and journals, and those of their rows
    in ``timers``/``outbox``.

    ``timers`` and ``outbox`` say which of the instances' timer and outbox rows may go
    (a purge spares live ones, an erasure nothing).
    """
    ids = list(ids)

    def delete(rows: QuerySet[Any]) -> int:
        return delete_in_batches(rows.filter(saga_id__in=ids), batch_size, on_batch=on_batch)

    return DeletedRows(
        inbox=delete(SagaInboxEntry.objects.all()),
        timeouts=delete(timers),
        outbox=delete(outbox),
        kept=delete(SagaKeptEvent.objects.all()),
        journal=delete(SagaJournalEntry.objects.all()),
    )


def delete_childless(ids: Sequence[uuid.UUID]) -> int:
    """Delete those of these instances that no inbox, timer, outbox, kept or journal row
    refers to.

    One statement, which checks the children itself: an instance that still has one (a
    live row a purge spared) is kept rather than failing the foreign key.
    """
    of_instance = {"saga_id": OuterRef("pk")}
    childless = (
        SagaInstance.objects.filter(pk__in=list(ids))
        .exclude(Exists(SagaInboxEntry.objects.filter(**of_instance)))
        .exclude(Exists(SagaTimeout.objects.filter(**of_instance)))
        .exclude(Exists(SagaOutboxMessage.objects.filter(**of_instance)))
        .exclude(Exists(SagaKeptEvent.objects.filter(**of_instance)))
        .exclude(Exists(SagaJournalEntry.objects.filter(**of_instance)))
    )
    return childless._raw_delete(childless.db)
