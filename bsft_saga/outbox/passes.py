"""Outbox passes: delivering the rows of a commit, and those nobody holds."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime

from bsft_saga.conf import saga_settings
from bsft_saga.delivery.passes import run_pass
from bsft_saga.delivery.report import DeliveryReport
from bsft_saga.events.envelope import Envelope
from bsft_saga.outbox.channel import OUTBOX, OutboxChannel


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
