"""The outbox: events staged inside a transaction and published after it commits.

Rows come from a step's ``ctx.publish`` and from ``publish(..., defer=True)``. Delivery
is at least once: right after commit, and again by ``deliver_pending`` (run by the drain
task and command) for rows whose delivery was lost with its process. Each delivery claims
its row first, so two deliverers never publish one row at the same time.
"""

from __future__ import annotations

import logging
import operator
import uuid
from collections.abc import Iterable
from dataclasses import astuple, dataclass
from datetime import datetime
from functools import partial
from typing import Any

from django.db import transaction
from django.db.models import F

from bsft_saga import clock
from bsft_saga.conf import saga_settings
from bsft_saga.events import codec
from bsft_saga.events.envelope import Envelope
from bsft_saga.events.registry import event_class, event_type_of
from bsft_saga.events.sending import send_envelope
from bsft_saga.exceptions import failure_reason
from bsft_saga.models import SagaOutboxMessage
from bsft_saga.querysets import SagaOutboxQuerySet
from bsft_saga.signals import deferred_event_committed

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeliveryReport:
    """What one delivery pass did with outbox rows."""

    delivered: int = 0
    failed: int = 0
    dead_lettered: int = 0
    unclaimed: int = 0

    def __add__(self, other: DeliveryReport) -> DeliveryReport:
        return DeliveryReport(*map(operator.add, astuple(self), astuple(other)))


def new_row(
    envelope: Envelope, payload: dict[str, Any], *, saga_id: uuid.UUID | None = None
) -> SagaOutboxMessage:
    """An unsaved outbox row for ``envelope``, whose event ``payload`` encodes."""
    return SagaOutboxMessage(
        id=envelope.message_id,
        saga_id=saga_id,
        event_type=envelope.event_type,
        payload=payload,
        correlation_id=envelope.correlation_id or "",
        causation_id=envelope.causation_id,
        deadline=envelope.deadline,
        created_at=envelope.published_at,
    )


def deliver_after_commit(envelopes: list[Envelope]) -> None:
    """Deliver the rows of ``envelopes`` once the current transaction commits.

    The envelopes are published from memory; the rows are only claimed and stamped.
    """
    if envelopes:
        transaction.on_commit(partial(_deliver_staged, envelopes))


def stage_deferred(envelope: Envelope, payload: dict[str, Any]) -> None:
    """Write ``envelope`` to the outbox and hand it to a worker after commit."""
    new_row(envelope, payload).save(force_insert=True)
    transaction.on_commit(
        partial(deferred_event_committed.send, sender=None, message_id=envelope.message_id)
    )


def deliver(message_ids: Iterable[uuid.UUID], *, now: datetime | None = None) -> DeliveryReport:
    """Claim and publish each row; one failing row never stops the others."""
    report = DeliveryReport()
    for message_id in message_ids:
        report += _deliver_one(message_id, now or clock.now())
    return report


def _deliver_staged(envelopes: list[Envelope]) -> None:
    now = clock.now()
    for envelope in envelopes:
        _deliver_one(envelope.message_id, now, envelope=envelope)


def deliver_pending(
    *, batch_size: int | None = None, now: datetime | None = None
) -> DeliveryReport:
    """Deliver outbox rows nobody holds: those whose after-commit delivery was lost."""
    moment = now or clock.now()
    limit = batch_size or saga_settings.timeouts.batch_size
    ids = list(SagaOutboxMessage.objects.deliverable(moment).values_list("id", flat=True)[:limit])
    return deliver(ids, now=moment)


def _deliver_one(
    message_id: uuid.UUID, now: datetime, *, envelope: Envelope | None = None
) -> DeliveryReport:
    """Claim one row, publish it (``envelope``, or rebuilt from the row), stamp it."""
    token = uuid.uuid4()
    claimed = (
        SagaOutboxMessage.objects.deliverable(now)
        .filter(pk=message_id)
        .update(claim_token=token, claimed_until=now + saga_settings.timeouts.claim_lease)
    )
    if not claimed:
        return DeliveryReport(unclaimed=1)
    mine = SagaOutboxMessage.objects.filter(pk=message_id, claim_token=token)
    try:
        send_envelope(envelope or envelope_of(SagaOutboxMessage.objects.get(pk=message_id)))
    except Exception as exc:
        logger.exception("bsft_saga: delivering outbox message %s failed", message_id)
        return _record_failure(mine, exc)
    mine.update(delivered_at=clock.now())
    return DeliveryReport(delivered=1)


def _record_failure(mine: SagaOutboxQuerySet, exc: Exception) -> DeliveryReport:
    """Count an attempt and release the claim; dead-letter at ``MAX_DISPATCH_ATTEMPTS``."""
    attempts = mine.values_list("attempts", flat=True).first()
    if attempts is None:
        return DeliveryReport(unclaimed=1)  # our claim was taken over meanwhile
    release = {"last_error": failure_reason(exc), "claim_token": None, "claimed_until": None}
    if attempts + 1 >= saga_settings.timeouts.max_dispatch_attempts:
        mine.update(attempts=attempts + 1, dead_lettered_at=clock.now(), **release)
        return DeliveryReport(dead_lettered=1)
    mine.update(attempts=F("attempts") + 1, **release)
    return DeliveryReport(failed=1)


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
