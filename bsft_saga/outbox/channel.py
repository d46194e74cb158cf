"""The outbox channel: what is particular to outbox rows in the delivery machinery."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from types import MappingProxyType
from typing import Any

from bsft_saga import journal, telemetry
from bsft_saga.correlation import SagaInScope, correlation_scope, saga_scope
from bsft_saga.delivery.channel import Channel, Retirement, retired
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

    def retire(
        self,
        rows: Sequence[SagaOutboxMessage],
        outcome: Outcome,
        now: datetime,
        *,
        reason: str = "",
        journaled: bool = False,
    ) -> Retirement:
        """A delivered row gets ``delivered_at``; a dead-lettered one only the shared
        columns. A message a saga's step published that is given up is in that saga's
        journal (one ``publish(..., defer=True)`` wrote belongs to no saga); a delivered one
        is not (what it woke writes its own entries)."""
        if outcome is Outcome.DELIVERED:
            return Retirement({"delivered_at": now, **retired(outcome, now)}, [])
        if outcome is not Outcome.DEAD_LETTERED:
            raise ValueError(f"an outbox message is never {outcome.value}")
        entries = [
            journal.outbox_entry(row, JournalKind.DEAD_LETTERED, at=now)
            for row in rows
            if row.saga_id is not None and not journaled
        ]
        return Retirement(retired(outcome, now), entries)

    def envelope(self, row: SagaOutboxMessage, token: uuid.UUID) -> Envelope:
        return self.known.get(row.pk) or envelope_of(row)

    def saga_type(self, row: SagaOutboxMessage) -> str:
        return row.saga.saga_type if row.saga is not None else ""

    def describe(self, row: SagaOutboxMessage) -> str:
        owner = f" of saga {row.saga.saga_type}[{row.saga.correlation_key}]" if row.saga else ""
        return f"outbox message {row.event_type!r} (id {row.pk}){owner}"

    @contextmanager
    def written_with(self, row: SagaOutboxMessage) -> Iterator[None]:
        saga = row.saga
        with (
            correlation_scope(row.correlation_id or None),
            saga_scope(
                None if saga is None else SagaInScope(saga.saga_type, saga.correlation_key, saga.pk)
            ),
        ):
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
