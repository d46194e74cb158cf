"""The kept-event channel: what is particular to kept events in the delivery machinery."""

from __future__ import annotations

import uuid
from datetime import datetime
from types import MappingProxyType
from typing import Any

from bsft_saga import clock, journal
from bsft_saga.delivery.channel import Channel
from bsft_saga.delivery.report import Outcome
from bsft_saga.events.envelope import Envelope
from bsft_saga.kept.rows import envelope_of
from bsft_saga.models import JournalKind, SagaKeptEvent
from bsft_saga.querysets import SagaKeptEventQuerySet


class KeptChannel(Channel[SagaKeptEvent]):
    """Kept events, for the delivery machinery's failures, dead letters and requeue.

    A kept event is pending until applied (deleted) or dead-lettered; it is ready once its
    saga is at its step (``next_attempt_at`` set). It is applied to its one saga
    (``handler.apply_kept``), never published to the receivers.
    """

    model = SagaKeptEvent
    noun = "kept event"
    counters = MappingProxyType({Outcome.DEAD_LETTERED: "kept.dead_lettered"})
    related = ("saga",)
    pending_where = MappingProxyType({"dead_lettered_at": None})
    #: Only a dead letter: an applied kept event is deleted by the window applying it. One
    #: given up is in its saga's journal.
    journal_kinds = MappingProxyType({Outcome.DEAD_LETTERED: JournalKind.DEAD_LETTERED})

    def all_rows(self) -> SagaKeptEventQuerySet:
        return SagaKeptEvent.objects.all()

    def claimable(self, now: datetime) -> SagaKeptEventQuerySet:
        return SagaKeptEvent.objects.claimable(now)

    def pending_rows(self) -> SagaKeptEventQuerySet:
        return SagaKeptEvent.objects.pending()

    def delivered_rows(self) -> SagaKeptEventQuerySet:
        return SagaKeptEvent.objects.none()  # an applied kept event is deleted

    def journal_entry(
        self, row: SagaKeptEvent, kind: JournalKind, now: datetime
    ) -> dict[str, Any] | None:
        return None if row.saga_id is None else journal.kept_entry(row, kind, at=now)

    def load_related(self, rows: list[SagaKeptEvent]) -> dict[Any, Any]:
        """Nothing: a claimed kept event is applied by its saga's own loop, whose plan reads
        the saga afresh (a requeue loads it, through ``related``)."""
        return {}

    def envelope(self, row: SagaKeptEvent, token: Any) -> Envelope:
        return envelope_of(row)

    def saga_of(self, row: SagaKeptEvent) -> uuid.UUID | None:
        return row.saga_id

    def saga_type(self, row: SagaKeptEvent) -> str:
        return row.saga_type

    def describe(self, row: SagaKeptEvent) -> str:
        key = row.correlation_key or "-"
        owner = f"saga {row.saga_type}[{key}]" if row.saga_id else f"key {row.saga_type}[{key}]"
        return f"kept event {row.event_type!r} (id {row.pk}, message {row.message_id}) of {owner}"

    def after_requeue(self, row: SagaKeptEvent) -> None:
        """A requeued row whose saga is at its step is ready at once; one for a later step
        becomes ready when the saga gets there."""
        if row.saga is not None and row.saga.step_index == row.step_index:
            SagaKeptEvent.objects.filter(pk=row.pk).update(next_attempt_at=clock.now())

    def requeue_refusal(self, row: SagaKeptEvent, user: Any) -> str | None:
        if row.saga is not None and row.saga.is_complete:
            return f"{self.describe(row)} belongs to a saga that has completed"
        return None


KEPT = KeptChannel()
