"""The outbox channel: what is particular to outbox rows in the delivery machinery."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from types import MappingProxyType
from typing import Any

from bsft_saga import journal, telemetry
from bsft_saga.delivery.channel import Channel, written_scope
from bsft_saga.delivery.report import Outcome
from bsft_saga.events.envelope import Envelope
from bsft_saga.models import JournalKind, SagaOutboxMessage
from bsft_saga.outbox.rows import envelope_of
from bsft_saga.querysets import SagaOutboxQuerySet


class OutboxChannel(Channel[SagaOutboxMessage]):
    """Outbox rows: open until delivered or dead-lettered.

    ``known`` maps message ids to envelopes still in memory (the transaction that staged
    them just committed), which are published as they are instead of decoded from the row.
    """

    model = SagaOutboxMessage
    noun = "outbox message"
    counters = MappingProxyType({Outcome.DEAD_LETTERED: "outbox.dead_lettered"})
    related = ("saga",)
    pending_where = MappingProxyType({"delivered_at": None, "dead_lettered_at": None})
    #: A delivered row gets ``delivered_at`` and no entry (what it woke writes its own); a
    #: message a saga's step published that is given up is in that saga's journal (one
    #: ``publish(..., defer=True)`` wrote belongs to no saga).
    journal_kinds = MappingProxyType(
        {Outcome.DELIVERED: None, Outcome.DEAD_LETTERED: JournalKind.DEAD_LETTERED}
    )

    def __init__(self, known: Mapping[uuid.UUID, Envelope] | None = None) -> None:
        self.known = known or {}

    def all_rows(self) -> SagaOutboxQuerySet:
        return SagaOutboxMessage.objects.all()

    def claimable(self, now: datetime) -> SagaOutboxQuerySet:
        return SagaOutboxMessage.objects.claimable(now)

    def pending_rows(self) -> SagaOutboxQuerySet:
        return SagaOutboxMessage.objects.pending()

    def delivered_rows(self) -> SagaOutboxQuerySet:
        return SagaOutboxMessage.objects.delivered()

    def stamped(self, outcome: Outcome, now: datetime, *, reason: str) -> dict[str, Any]:
        return {"delivered_at": now} if outcome is Outcome.DELIVERED else {}

    def journal_entry(
        self, row: SagaOutboxMessage, kind: JournalKind, now: datetime
    ) -> dict[str, Any] | None:
        return None if row.saga_id is None else journal.outbox_entry(row, kind, at=now)

    def envelope(self, row: SagaOutboxMessage, token: uuid.UUID) -> Envelope:
        return self.known.get(row.pk) or envelope_of(row)

    def saga_type(self, row: SagaOutboxMessage) -> str:
        return row.saga.saga_type if row.saga is not None else ""

    def describe(self, row: SagaOutboxMessage) -> str:
        owner = f" of saga {row.saga.saga_type}[{row.saga.correlation_key}]" if row.saga else ""
        return f"outbox message {row.event_type!r} (id {row.pk}){owner}"

    @contextmanager
    def written_with(self, row: SagaOutboxMessage) -> Iterator[None]:
        with written_scope(row.correlation_id, row.saga):
            yield

    @contextmanager
    def publishing(self, row: SagaOutboxMessage) -> Iterator[None]:
        """Deliver the row under the correlation id and inside the saga (if any) it was
        written with, in a ``saga.deliver`` span that links to the trace that wrote it."""
        with (
            self.written_with(row),
            telemetry.deliver_span(
                self.saga_type(row), row.event_type, trace_context=row.trace_context
            ),
        ):
            yield

    def requeue_refusal(self, row: SagaOutboxMessage, user: Any) -> str | None:
        """A message a step published is not requeued once its saga has completed after
        that step (escalated, expired, terminated): delivered now, it would act for a saga
        that has ended. What the completing step itself published (a refund, a result) is
        the saga's last word, and is requeued."""
        saga = row.saga
        if saga is None or not saga.is_complete:
            return None
        if saga.completed_at is not None and row.created_at >= saga.completed_at:
            return None
        return (
            f"{self.describe(row)} was published before its saga completed; delivered now, "
            "it would act for a saga that has ended (publish what is still needed yourself)"
        )


OUTBOX = OutboxChannel()
