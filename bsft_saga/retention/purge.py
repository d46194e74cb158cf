"""``purge_saga_data()``: every saga table stays bounded, in bounded batches.

The ``purge_saga_data`` command and Celery task are thin faces over it; the
``purge_saga_timeouts`` command is the timers-only subset, ``purge_timeouts()``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from django.db.models import Q

from bsft_saga.models import SagaInboxEntry, SagaJournalEntry, SagaOutboxMessage, SagaTimeout
from bsft_saga.progress import Progress
from bsft_saga.querysets import SagaInstanceQuerySet
from bsft_saga.retention import selection
from bsft_saga.retention.batches import (
    DEFAULT_BATCH_SIZE,
    DeletedRows,
    check_batch_size,
    delete_in_batches,
    delete_instances,
    id_page_size,
)
from bsft_saga.retention.dispatchers import prune_dispatchers
from bsft_saga.retention.policy import FROM_SETTINGS, AuditWindow, RetentionPolicy


@dataclass(frozen=True)
class PurgeReport(DeletedRows):
    """Rows a purge deleted (with ``dry_run``: would delete), per table."""

    audit: int = 0
    #: Heartbeats of dispatchers long gone (:mod:`bsft_saga.retention.dispatchers`).
    dispatchers: int = 0

    def __str__(self) -> str:
        return (
            f"instances={self.instances} inbox={self.inbox} journal={self.journal} "
            f"timeouts={self.timeouts} outbox={self.outbox} audit={self.audit} "
            f"dispatchers={self.dispatchers}"
        )


def purge_saga_data(
    *,
    older_than: timedelta | None = None,
    keep_dead_lettered: bool | None = None,
    audit_older_than: AuditWindow = FROM_SETTINGS,
    dry_run: bool = False,
    batch_size: int = DEFAULT_BATCH_SIZE,
    now: datetime | None = None,
    progress: Progress | None = None,
) -> PurgeReport:
    """Delete what the retention windows no longer keep; return how many rows of each kind.

    Deleted: completed instances whose ``completed_at`` is older than ``older_than``, with
    their inbox rows, timers and outbox rows; retired timers of any instance whose
    ``dispatched_at`` is older; outbox rows delivered, or dead-lettered, before the window,
    whatever instance they belong to; ``SagaAuditRecord`` rows older than
    ``audit_older_than``; the heartbeats of dispatchers that have not passed for a day
    (:mod:`~bsft_saga.retention.dispatchers`, measured from the clock). Never deleted:
    active instances and their inbox rows, pending timers, pending outbox rows (a
    finished instance that still has one waits for the next purge), and with
    ``keep_dead_lettered`` every dead letter, the completed instance it belongs to and that
    instance's inbox rows.

    Omitted arguments take their ``BSFT_SAGA["RETENTION"]`` value; ``audit_older_than=None``
    keeps every audit record. At most ``batch_size`` rows go per statement, each statement
    committing on its own outside a transaction, and rows are never loaded: run it beside
    live traffic, and again after an interruption. ``dry_run`` only counts.

    ``progress`` (see :mod:`bsft_saga.progress`) is told the rows deleted so far after each
    statement, against the total a dry run counts first (that count is one more query per
    table, made only when ``progress`` is given).
    """
    policy = RetentionPolicy.build(
        older_than=older_than,
        keep_dead_lettered=keep_dead_lettered,
        audit_older_than=audit_older_than,
        now=now,
    )
    return apply_policy(policy, dry_run=dry_run, batch_size=batch_size, progress=progress)


def apply_policy(
    policy: RetentionPolicy,
    *,
    dry_run: bool = False,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: Progress | None = None,
) -> PurgeReport:
    """``purge_saga_data`` with its windows already measured: delete (or count) by ``policy``."""
    check_batch_size(batch_size)
    if dry_run:
        return _count(policy)
    tally = None if progress is None else _Tally(progress, _count(policy))
    rows = DeletedRows(
        timeouts=delete_in_batches(selection.retired_timers(policy), batch_size, on_batch=tally),
        outbox=delete_in_batches(selection.delivered_outbox(policy), batch_size, on_batch=tally)
        + delete_in_batches(selection.dead_outbox(policy), batch_size, on_batch=tally),
    )
    for ids in _pages(selection.finished_instances(policy), id_page_size(batch_size)):
        rows += delete_instances(
            ids,
            timers=SagaTimeout.objects.exclude(selection.LIVE_TIMER),
            outbox=SagaOutboxMessage.objects.exclude(selection.PENDING_OUTBOX),
            batch_size=batch_size,
            on_batch=tally,
        )
    audit = delete_in_batches(selection.expired_audit_records(policy), batch_size, on_batch=tally)
    dispatchers = prune_dispatchers(batch_size=batch_size)
    if tally is not None:
        tally(dispatchers)
    return PurgeReport(**asdict(rows), audit=audit, dispatchers=dispatchers)


class _Tally:
    """Adds up the rows each statement deleted and tells ``progress`` the sum so far."""

    def __init__(self, progress: Progress, expected: PurgeReport) -> None:
        self.progress = progress
        self.total = sum(asdict(expected).values())
        self.done = 0

    def __call__(self, count: int) -> None:
        if count:  # the statement that finds a table done tells nothing new
            self.done += count
            self.progress(self.done, self.total)


def purge_timeouts(
    older_than: timedelta,
    *,
    keep_dead_lettered: bool = False,
    dry_run: bool = False,
    batch_size: int = DEFAULT_BATCH_SIZE,
    now: datetime | None = None,
) -> int:
    """Delete only timer rows whose ``dispatched_at`` is older than ``now - older_than``.

    The timers part of ``purge_saga_data`` (``manage.py purge_saga_timeouts``): fired,
    missed, canceled and dead-lettered rows alike, the dead letters kept with
    ``keep_dead_lettered``; pending rows are never touched. Returns the number of rows
    deleted (with ``dry_run``: that would be).
    """
    check_batch_size(batch_size)
    rows = selection.retired_timers(
        RetentionPolicy.build(
            older_than=older_than,
            keep_dead_lettered=keep_dead_lettered,
            audit_older_than=None,
            now=now,
        )
    )
    return rows.count() if dry_run else delete_in_batches(rows, batch_size)


def _count(policy: RetentionPolicy) -> PurgeReport:
    """What a purge under ``policy`` would delete now: each row counted once."""
    instances = selection.finished_instances(policy)
    of_instances = Q(saga_id__in=instances.values("pk"))
    retired = Q(pk__in=selection.retired_timers(policy).values("pk"))
    settled = Q(pk__in=selection.delivered_outbox(policy).values("pk")) | Q(
        pk__in=selection.dead_outbox(policy).values("pk")
    )
    return PurgeReport(
        instances=instances.count(),
        inbox=SagaInboxEntry.objects.filter(of_instances).count(),
        journal=SagaJournalEntry.objects.filter(of_instances).count(),
        timeouts=SagaTimeout.objects.filter(
            (of_instances & ~selection.LIVE_TIMER) | retired
        ).count(),
        outbox=SagaOutboxMessage.objects.filter(
            (of_instances & ~selection.PENDING_OUTBOX) | settled
        ).count(),
        audit=selection.expired_audit_records(policy).count(),
        dispatchers=prune_dispatchers(dry_run=True),
    )


def _pages(instances: SagaInstanceQuerySet, size: int) -> Iterator[list[uuid.UUID]]:
    """The ids of ``instances``, oldest first, ``size`` at a time.

    Keyset paging on ``(completed_at, id)``: each page starts after the last one, so the
    instances a purge keeps (a dead letter's, say) are read once, not once per page.
    """
    after: tuple[datetime | None, uuid.UUID] | None = None  # completed_at: never None here
    while True:
        page = instances
        if after is not None:
            completed_at, pk = after
            page = page.filter(
                Q(completed_at__gt=completed_at) | Q(completed_at=completed_at, pk__gt=pk)
            )
        rows = list(page.order_by("completed_at", "pk").values_list("completed_at", "pk")[:size])
        if rows:
            yield [pk for _, pk in rows]
        if len(rows) < size:
            return
        after = rows[-1]
