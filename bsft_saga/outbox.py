"""The outbox: events staged inside a transaction and published after it commits.

Rows come from a step's ``ctx.publish`` and from ``publish(..., defer=True)``. Delivery is
at least once: right after commit, and again by ``deliver_pending`` (run by the drain task
and command) for rows whose delivery was lost with its process or failed. A delayed message
(a row with ``deliver_at``) is left to ``deliver_pending``, which claims no row before its
``deliver_at``: nothing hands it over at commit. Rows go through
the same passes as timers (:mod:`bsft_saga.delivery`): claimed with a lease, their
receivers run with no transaction open, their stamps and the steps they woke committed in
groups, retried with back-off, dead-lettered at ``MAX_DISPATCH_ATTEMPTS`` and requeued by
``requeue_saga_outbox``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime
from functools import partial
from types import MappingProxyType
from typing import Any

from django.db import transaction

from bsft_saga import journal
from bsft_saga.conf import saga_settings
from bsft_saga.db import sql
from bsft_saga.delivery import requeue
from bsft_saga.delivery.channel import Channel
from bsft_saga.delivery.passes import run_pass
from bsft_saga.delivery.report import DeliveryReport
from bsft_saga.delivery.requeue import RequeueReport
from bsft_saga.events import codec, nesting
from bsft_saga.events.envelope import Envelope
from bsft_saga.events.registry import event_class, event_type_of
from bsft_saga.models import JournalKind, SagaOutboxMessage
from bsft_saga.progress import Progress
from bsft_saga.querysets import SagaOutboxQuerySet
from bsft_saga.signals import deferred_event_committed

__all__ = ["DeliveryReport", "deliver", "deliver_pending", "requeue_dead_lettered"]

logger = logging.getLogger(__name__)


class OutboxChannel(Channel[SagaOutboxMessage]):
    """Outbox rows: open until delivered or dead-lettered.

    ``known`` maps message ids to envelopes still in memory (the transaction that staged
    them just committed), which are published as they are instead of decoded from the row.
    """

    model = SagaOutboxMessage
    noun = "outbox message"
    dead_lettered_counter = "outbox.dead_lettered"
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

    def delivered(self, now: datetime) -> dict[str, Any]:
        return {"delivered_at": now}

    def envelope(self, row: SagaOutboxMessage, token: uuid.UUID) -> Envelope:
        return self.known.get(row.pk) or envelope_of(row)

    def saga_type(self, row: SagaOutboxMessage) -> str:
        return row.saga.saga_type if row.saga is not None else ""

    def describe(self, row: SagaOutboxMessage) -> str:
        owner = f" of saga {row.saga.saga_type}[{row.saga.correlation_key}]" if row.saga else ""
        return f"outbox message {row.event_type!r} (id {row.pk}){owner}"

    def journal_entry(
        self, row: SagaOutboxMessage, kind: JournalKind, now: datetime
    ) -> dict[str, Any] | None:
        """A message a saga's step published that is given up is in that saga's journal
        (one ``publish(..., defer=True)`` wrote belongs to no saga)."""
        if kind != JournalKind.DEAD_LETTERED or row.saga_id is None:
            return None
        return journal.outbox_entry(row, kind, at=now)

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


def row_values(
    envelope: Envelope,
    payload: dict[str, Any],
    *,
    saga_id: uuid.UUID | None = None,
    deliver_at: datetime | None = None,
) -> dict[str, Any]:
    """The outbox row for ``envelope``, whose event ``payload`` encodes (for ``sql.insert``);
    ``deliver_at``: a delayed message's delivery time."""
    return {
        "id": envelope.message_id,
        "saga": saga_id,
        "event_type": envelope.event_type,
        "payload": payload,
        "correlation_id": envelope.correlation_id or "",
        "causation_id": envelope.causation_id,
        "deadline": envelope.deadline,
        "created_at": envelope.published_at,
        "deliver_at": deliver_at,
    }


def deliver_after_commit(envelopes: list[Envelope]) -> None:
    """Deliver the rows of ``envelopes`` once the current transaction commits.

    The envelopes are published from memory; the rows are only claimed and stamped. A
    delivery that fails is the drain's to retry: it never raises into the code whose
    transaction just committed.
    """
    if envelopes:
        transaction.on_commit(partial(_deliver_staged, envelopes), robust=True)


def stage_deferred(
    envelope: Envelope, payload: dict[str, Any], *, deliver_at: datetime | None = None
) -> None:
    """Write ``envelope`` to the outbox and hand it to a worker after commit.

    A delayed message (``deliver_at``) is handed to nobody: the drain delivers it once its
    time has come, so the one way it reaches its receivers is the one that never runs early.

    A message id already in the outbox (the same envelope published again: a retried
    request, a replayed import) writes nothing and hands nothing over: the message is
    delivered once, as it was first written, whether it is still waiting or delivered
    already.
    """
    values = row_values(envelope, payload, deliver_at=deliver_at)
    if not sql.insert_unless_present(SagaOutboxMessage, values):
        logger.info(
            "bsft_saga: %s %s is in the outbox already; publishing it again wrote nothing",
            envelope.event_type,
            envelope.message_id,
        )
        return
    if deliver_at is not None:
        return
    transaction.on_commit(
        partial(deferred_event_committed.send, sender=None, message_id=envelope.message_id),
        robust=True,
    )


def deliver(
    message_ids: Iterable[uuid.UUID],
    *,
    now: datetime | None = None,
    known: Mapping[uuid.UUID, Envelope] | None = None,
) -> DeliveryReport:
    """Claim and publish these rows in one pass; one failing row never stops the others.

    A row that is delivered, dead-lettered, held by another deliverer or waiting for its
    retry back-off is left alone (``unclaimed``).
    """
    ids = list(message_ids)
    if not ids:
        return DeliveryReport()
    return run_pass(OutboxChannel(known), limit=len(ids), only=ids, now=now)


def deliver_pending(
    *, batch_size: int | None = None, now: datetime | None = None
) -> DeliveryReport:
    """Deliver a batch of outbox rows nobody holds: lost or failed earlier deliveries."""
    limit = batch_size or saga_settings.delivery.batch_size
    return run_pass(OUTBOX, limit=limit, now=now)


def _deliver_staged(envelopes: list[Envelope]) -> None:
    try:
        # Nested in whatever committed them (a publish(), a pass's commit): a step that
        # publishes what reaches it again is stopped by the depth limit, not by Python's.
        with nesting.nested():
            deliver([e.message_id for e in envelopes], known={e.message_id: e for e in envelopes})
    except Exception:
        # The transaction that staged them has committed: the rows wait for the drain.
        logger.exception("bsft_saga: delivering %d staged event(s) failed", len(envelopes))


def requeue_dead_lettered(
    ids: Iterable[uuid.UUID] | None = None, *, user: Any = None, progress: Progress | None = None
) -> RequeueReport:
    """Make dead-lettered outbox rows deliverable again (``None``: all of them); the next
    pass delivers them. Each requeue is audited under ``user`` (``None``: code or a
    command). See ``bsft_saga.delivery.requeue``, also for ``progress``."""
    wanted = None if ids is None else list(ids)
    return requeue.requeue_dead_lettered(OUTBOX, wanted, user=user, progress=progress)


def envelope_of(row: SagaOutboxMessage) -> Envelope:
    """Rebuild the envelope a row publishes; ``UnknownEventType`` if its type is gone."""
    cls = event_class(row.event_type)
    event: object = codec.decode(cls, row.payload)
    return Envelope(
        message_id=row.pk,
        event=event,
        event_type=event_type_of(cls),  # the primary name, also for a row stored under an alias
        correlation_id=row.correlation_id or None,
        causation_id=row.causation_id,
        deadline=row.deadline,
        published_at=row.created_at,
    )
