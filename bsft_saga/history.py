"""Reading the journal: what happened to a saga, newest first. Nothing here writes.

The entries are written by :mod:`bsft_saga.journal`, in the commit of what each records.
They hold metadata only, never state or payload, so every reader here is for anyone
allowed to see sagas: the admin timeline, ``GET instances/<id>/history/`` and
``manage.py saga_history``.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import QuerySet

from bsft_saga.db.datetimes import readable_rows
from bsft_saga.models import SagaInstance, SagaJournalEntry

__all__ = ["ENTRY_FIELDS", "InstanceHistory", "KeyHistory", "key_history", "newest_first"]

#: What every reader shows of an entry, in this order.
ENTRY_FIELDS = (
    "at",
    "kind",
    "event_type",
    "message_id",
    "step_before",
    "step_after",
    "version",
    "via",
    "timer_name",
    "user",
    "correlation_id",
)


def newest_first(entries: QuerySet[SagaJournalEntry]) -> QuerySet[SagaJournalEntry]:
    """``entries`` newest first (``at``, then ``id`` for entries of the same instant), the
    order of the index ``bsft_saga_journal_saga_idx``; an unreadable ``at`` does not fail
    the read (:func:`~bsft_saga.db.datetimes.readable_rows`)."""
    return readable_rows(entries.order_by("-at", "-id"))


@dataclass(frozen=True)
class InstanceHistory:
    """One instance and the newest of its entries."""

    instance: SagaInstance
    #: Newest first; fewer than ``total`` when the limit ran out.
    entries: tuple[SagaJournalEntry, ...]
    #: How many entries the instance has in all.
    total: int


@dataclass(frozen=True)
class KeyHistory:
    """The journals of one key's instances, newest instance first."""

    saga_type: str
    correlation_key: str
    instances: tuple[InstanceHistory, ...]
    #: How many instances the key has in all (more than ``instances`` when the limit ran out).
    instances_total: int

    @property
    def entries_shown(self) -> int:
        return sum(len(shown.entries) for shown in self.instances)


def key_history(saga_type: str, correlation_key: str, *, limit: int) -> KeyHistory:
    """The journals of the instances of ``saga_type`` with ``correlation_key``.

    Instances come newest first (``created_at``): the active one, if any, then the finished
    ones the key had before it. Each instance's entries come newest first. ``limit`` caps
    the entries read in all, in that order, so the newest ones are always there; it caps the
    instances too (one that has no entry, because it started before the journal existed,
    would otherwise cost nothing). Reads a bounded number of rows whatever the key's past:
    two queries per instance shown, at most ``limit`` instances and ``limit`` entries.
    """
    instances = SagaInstance.objects.for_key(saga_type, correlation_key)
    shown: list[InstanceHistory] = []
    left = limit
    for instance in readable_rows(instances.order_by("-created_at", "-id"))[:limit]:
        if left == 0:
            break
        journal = newest_first(instance.journal.all())
        entries = tuple(journal[:left])
        left -= len(entries)
        total = len(entries) if left > 0 else journal.count()
        shown.append(InstanceHistory(instance=instance, entries=entries, total=total))
    instances_total = len(shown) if left > 0 and len(shown) < limit else instances.count()
    return KeyHistory(
        saga_type=saga_type,
        correlation_key=correlation_key,
        instances=tuple(shown),
        instances_total=instances_total,
    )
