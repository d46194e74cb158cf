"""``erase_saga_data()``: forget one correlation key of one saga type (an erasure request).

The ``erase_saga_data`` command is a thin face over it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction
from django.db.models import F

from bsft_saga import clock
from bsft_saga.audit import AuditRecorder, get_audit_recorder
from bsft_saga.models import SagaInstance, SagaKeptEvent, SagaOutboxMessage, SagaTimeout
from bsft_saga.progress import Progress
from bsft_saga.retention.batches import (
    DEFAULT_BATCH_SIZE,
    DeletedRows,
    check_batch_size,
    delete_childless,
    delete_children,
)
from bsft_saga.timeouts import store as timer_store

#: The audit action of every erased instance.
ERASED = "saga.instance.erased"


@dataclass(frozen=True)
class EraseReport:
    """What ``erase_saga_data`` did (with ``dry_run``: would do).

    ``erased``: the ids of the instances deleted; ``kept_active``: active instances of the
    key left alone because ``include_active`` was not given. ``rows`` counts every row
    deleted, the instances' inbox rows, timers and outbox rows included.
    """

    erased: tuple[uuid.UUID, ...] = ()
    kept_active: tuple[uuid.UUID, ...] = ()
    rows: DeletedRows = field(default_factory=DeletedRows)

    @property
    def instances(self) -> int:
        return len(self.erased)


def erase_saga_data(
    saga_type: str,
    correlation_key: str,
    *,
    include_active: bool = False,
    dry_run: bool = False,
    batch_size: int = DEFAULT_BATCH_SIZE,
    now: datetime | None = None,
    progress: Progress | None = None,
) -> EraseReport:
    """Delete every completed instance of ``saga_type`` for ``correlation_key``, with all
    its inbox rows, timers, outbox rows and kept events, pending ones included, and the
    events kept for the key before a saga of it started.

    With ``include_active`` the active instance of the key goes too: in one transaction it
    is completed (which fences off a step running concurrently: its version check fails)
    and its pending timers are canceled, so that no dispatcher fires them any more; then
    it is deleted like the others. Without it, the active instance is left alone and
    listed in ``kept_active``.

    Each erased instance gets one audit record, ``action="saga.instance.erased"`` with
    ``user=None``, from the configured ``AUDIT_RECORDER`` (none when that is ``None``),
    committed with the deletion of the instance row. An instance that does not exist any
    more when its turn comes (a concurrent erasure) is skipped. ``dry_run`` deletes nothing
    and records nothing. ``progress`` (see :mod:`bsft_saga.progress`) is told after each
    instance how many of the instances found have been dealt with.
    """
    check_batch_size(batch_size)
    moment = now or clock.now()
    rows = list(
        SagaInstance.objects.for_key(saga_type, correlation_key)
        .order_by("created_at", "pk")
        .values_list("pk", "is_complete")
    )
    kept = tuple(pk for pk, complete in rows if not complete and not include_active)
    targets = [pk for pk, complete in rows if complete or include_active]
    if dry_run:
        return EraseReport(erased=tuple(targets), kept_active=kept)
    recorder = get_audit_recorder()
    erased: list[uuid.UUID] = []
    total = DeletedRows()
    for done, pk in enumerate(targets, start=1):
        children, gone = _erase_one(pk, saga_type, correlation_key, moment, recorder, batch_size)
        total += children
        if gone:
            erased.append(pk)
        if progress is not None:
            progress(done, len(targets))
    # Events kept for the key before a saga of it started belong to no instance: erased
    # with the key's data all the same.
    unowned, _ = (
        SagaKeptEvent.objects.without_saga()
        .filter(saga_type=saga_type, correlation_key=correlation_key)
        .delete()
    )
    total += DeletedRows(instances=len(erased), kept=unowned)
    return EraseReport(erased=tuple(erased), kept_active=kept, rows=total)


def _erase_one(
    pk: uuid.UUID,
    saga_type: str,
    correlation_key: str,
    moment: datetime,
    recorder: AuditRecorder | None,
    batch_size: int,
) -> tuple[DeletedRows, bool]:
    """Erase one instance: its child rows deleted, and whether this call deleted the
    instance row (not when someone else erased it meanwhile)."""
    with transaction.atomic():
        # Completing it first fences off concurrent steps; its timers never fire again.
        SagaInstance.objects.filter(pk=pk, is_complete=False).update(
            is_complete=True, completed_at=moment, updated_at=moment, version=F("version") + 1
        )
        timer_store.cancel_all(pk, now=moment)
    children = delete_children(
        [pk],
        timers=SagaTimeout.objects.all(),
        outbox=SagaOutboxMessage.objects.all(),
        batch_size=batch_size,
    )
    with transaction.atomic():
        if not delete_childless([pk]):
            return children, False  # erased meanwhile by someone else
        if recorder is not None:
            recorder.record(
                action=ERASED,
                user=None,
                saga_type=saga_type,
                correlation_key=correlation_key,
                instance_id=pk,
            )
    return children, True
