"""Plain receivers of the ``event_published`` signal: the world around the sagas.

They are connected in ``OrdersConfig.ready()``. A timer's or outbox event reaches them *at
least once*, so each is idempotent: the reminders are keyed on the envelope's
``message_id``, and a duplicate ``StockReserved`` is dropped by the order saga's step guard.
"""

from __future__ import annotations

import logging
from typing import Any

from bsft_saga import Envelope, publish
from bsft_saga.clock import now
from sample_project.orders.events import (
    QuoteCallbackDue,
    QuoteFollowUpDue,
    ReleaseStock,
    ReserveStock,
    StockReserved,
)
from sample_project.orders.models import Reminder

logger = logging.getLogger(__name__)


def _remind(kind: Reminder.Kind, envelope: Envelope) -> None:
    _, created = Reminder.objects.get_or_create(
        message_id=envelope.message_id,
        defaults={"quote_id": envelope.event.quote_id, "kind": kind, "sent_at": now()},
    )
    if created:
        logger.info("%s for quote %s sent", kind.label, envelope.event.quote_id)


def send_follow_up_email(sender: type, *, envelope: Envelope, **kwargs: Any) -> None:
    """``QuoteFollowUpDue``: e-mail the customer (here: record and log it)."""
    _remind(Reminder.Kind.FOLLOW_UP, envelope)


def create_call_back_task(sender: type, *, envelope: Envelope, **kwargs: Any) -> None:
    """``QuoteCallbackDue``: ask sales to phone the customer (here: record and log it)."""
    _remind(Reminder.Kind.CALL_BACK, envelope)


def reserve_stock(sender: type, *, envelope: Envelope, **kwargs: Any) -> None:
    """The warehouse: reserve the order's stock and confirm it."""
    order_id = envelope.event.order_id
    logger.info("warehouse: stock reserved for order %s", order_id)
    publish(StockReserved(order_id))


def release_stock(sender: type, *, envelope: Envelope, **kwargs: Any) -> None:
    """The warehouse: put a canceled order's stock back on the shelf."""
    logger.info("warehouse: stock released for order %s", envelope.event.order_id)


def connect() -> None:
    """Connect the receivers (called from ``OrdersConfig.ready()``)."""
    from bsft_saga.signals import event_published

    for event_class, receiver in [
        (QuoteFollowUpDue, send_follow_up_email),
        (QuoteCallbackDue, create_call_back_task),
        (ReserveStock, reserve_stock),
        (ReleaseStock, release_stock),
    ]:
        event_published.connect(
            receiver, sender=event_class, dispatch_uid=f"sample_project.orders.{receiver.__name__}"
        )
