"""Writing outbox rows and handing them over once their transaction commits."""

from __future__ import annotations

import logging
from datetime import datetime
from functools import partial
from typing import Any

from django.db import transaction

from bsft_saga import telemetry
from bsft_saga.db import sql
from bsft_saga.events import nesting
from bsft_saga.events.envelope import Envelope
from bsft_saga.models import SagaOutboxMessage
from bsft_saga.outbox.passes import deliver
from bsft_saga.outbox.rows import row_values
from bsft_saga.signals import deferred_event_committed

logger = logging.getLogger(__name__)


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
    values = row_values(
        envelope, payload, deliver_at=deliver_at, trace_context=telemetry.current_trace_context()
    )
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


def _deliver_staged(envelopes: list[Envelope]) -> None:
    try:
        # Nested in whatever committed them (a publish(), a pass's commit): a step that
        # publishes what reaches it again is stopped by the depth limit, not by Python's.
        with nesting.nested():
            deliver([e.message_id for e in envelopes], known={e.message_id: e for e in envelopes})
    except Exception:
        # The transaction that staged them has committed: the rows wait for the drain.
        logger.exception("bsft_saga: delivering %d staged event(s) failed", len(envelopes))
