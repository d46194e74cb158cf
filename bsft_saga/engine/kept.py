"""Kept events: an event that reached its saga before the step that awaits it.

A wait declared with ``keep_early=True`` keeps an event of its type that reaches an active
saga at an earlier step (one that does not await the type). Keeping is a window of its own:
the saga's version-checked ``UPDATE`` (so keeping and the commit that moves the saga on are
serialised: whichever loses re-plans against the other's result) and the
``SagaKeptEvent`` row, unique per saga and message id (so a redelivered event is kept once,
as the inbox handles it once).

The commit that reaches the keeping step registers, in its own transaction, an ``on_commit``
that applies the step's kept events oldest first, each in a window of its own (the engine's
``handler.apply_kept``); that window deletes the row it applies. A crash between the two
commits leaves the rows where they were: the drain pass applies such stragglers
(``handler.apply_stragglers``). A saga that completes deletes its kept rows in its last
window, and they are counted ignored (``not_awaited``).
"""

from __future__ import annotations

import uuid
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import F

from bsft_saga import telemetry
from bsft_saga.events import codec, payloads
from bsft_saga.events.envelope import Envelope
from bsft_saga.events.registry import event_class, event_type_of
from bsft_saga.models import SagaInstance, SagaKeptEvent


class LostRace(Exception):
    """The saga moved on (or completed) since the plan read it: plan again."""


def keep(
    saga_id: uuid.UUID, version: int, step_index: int, envelope: Envelope, *, now: datetime
) -> bool:
    """Keep ``envelope`` for the step ``step_index`` of the saga read at ``version``.

    ``False``: the saga already kept this message id (nothing written). ``LostRace``: the
    saga's version moved on; nothing was written.
    """
    try:
        with transaction.atomic():
            advanced = SagaInstance.objects.filter(
                pk=saga_id, version=version, is_complete=False
            ).update(version=version + 1, updated_at=now)
            if not advanced:
                raise LostRace
            SagaKeptEvent.objects.create(
                saga_id=saga_id,
                step_index=step_index,
                event_type=envelope.event_type,
                payload=payloads.encode_event(envelope.event, envelope.event_type),
                message_id=envelope.message_id,
                correlation_id=envelope.correlation_id or "",
                causation_id=envelope.causation_id,
                deadline=envelope.deadline,
                published_at=envelope.published_at,
                kept_at=now,
            )
    except IntegrityError:
        if SagaKeptEvent.objects.filter(saga_id=saga_id, message_id=envelope.message_id).exists():
            return False
        raise
    return True


def next_kept(saga_id: uuid.UUID) -> SagaKeptEvent | None:
    """The oldest kept row of the saga that the step it is at keeps, or ``None``."""
    return (
        SagaKeptEvent.objects.filter(
            saga_id=saga_id, saga__is_complete=False, saga__step_index=F("step_index")
        )
        .select_related("saga")
        .order_by("kept_at", "id")
        .first()
    )


def stragglers(limit: int) -> list[tuple[uuid.UUID, str, int]]:
    """Sagas at a step with kept rows waiting: ``(id, saga_type, flow_version)``, oldest first."""
    rows = (
        SagaKeptEvent.objects.filter(saga__is_complete=False, saga__step_index=F("step_index"))
        .order_by("kept_at", "id")
        .values_list("saga_id", "saga__saga_type", "saga__flow_version")[: limit * 4]
    )
    sagas: dict[uuid.UUID, tuple[uuid.UUID, str, int]] = {}
    for saga_id, saga_type, flow_version in rows:
        sagas.setdefault(saga_id, (saga_id, saga_type, flow_version))
    return list(sagas.values())[:limit]


def envelope_of(row: SagaKeptEvent) -> Envelope:
    """Rebuild the envelope that was kept, with its own id, correlation id and deadline."""
    cls = event_class(row.event_type)
    return Envelope(
        message_id=row.message_id,
        event=codec.decode(cls, row.payload),
        event_type=event_type_of(cls),
        correlation_id=row.correlation_id or None,
        causation_id=row.causation_id,
        deadline=row.deadline,
        published_at=row.published_at or row.kept_at,
    )


def discard(saga_id: uuid.UUID, saga_type: str) -> None:
    """Delete the kept rows of a saga completing in the current transaction; each is
    counted ignored (``not_awaited``) once that transaction commits."""
    discarded, _ = SagaKeptEvent.objects.filter(saga_id=saga_id).delete()
    if discarded:
        transaction.on_commit(lambda: _count_discarded(saga_type, discarded))


def _count_discarded(saga_type: str, discarded: int) -> None:
    for _ in range(discarded):
        telemetry.count_ignored(saga_type, "not_awaited")


def forget(kept_id: int) -> None:
    """Delete the kept row that the current window applies."""
    SagaKeptEvent.objects.filter(pk=kept_id).delete()
