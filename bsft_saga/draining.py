"""One drain pass: everything the Celery task, the command and the harness repeat."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from bsft_saga import outbox
from bsft_saga.engine.handler import apply_stragglers
from bsft_saga.timeouts.dispatcher import DrainReport, drain_due


@dataclass(frozen=True)
class PassReport:
    """What one pass did with due timers and with outbox rows."""

    timers: DrainReport
    outbox: outbox.DeliveryReport

    @property
    def found_work(self) -> bool:
        """Whether a row was fired, settled, delivered or dead-lettered: worth another pass.

        A failed attempt is not: the row waits for its retry back-off, and another pass
        right away would find it not due (a loop that counted failures as work would spin,
        and used to burn every attempt of a briefly failing receiver within one beat tick).
        """
        t, o = self.timers, self.outbox
        return bool(t.settled or o.delivered or o.dead_lettered or o.unclaimed)


def drain_pass(*, batch_size: int | None = None, now: datetime | None = None) -> PassReport:
    """Fire due timers (``drain_due``), then deliver outbox rows whose delivery was lost.

    ``now`` is the moment the timers are due by (default: the clock); only
    ``drain_saga_timeouts --as-of`` sets it, on development databases. Last, ready kept
    events that no commit applies (a crash between the commit reaching their step and the
    apply, a retry back-off that has run out, a requeue) are applied, and events kept for a
    key whose saga did not start within ``ENGINE.KEEP_EARLY_FOR`` are discarded
    (``apply_stragglers``: only if a flow keeps events, through partial indexes).
    """
    timers = drain_due(batch_size=batch_size, now=now)
    delivered = outbox.deliver_pending(batch_size=batch_size)
    apply_stragglers(limit=batch_size or 100)
    return PassReport(timers=timers, outbox=delivered)
