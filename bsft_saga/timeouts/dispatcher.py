"""``drain_due()``: one timer pass over due timers.

A pass claims a batch of due timers (oldest first, at most ``BATCH_SIZE``; a timer waiting
out its retry back-off is not due before ``next_attempt_at``), applies the catch-up policy,
then fires the rest: each timer's event is published, with no transaction open, under the
correlation id it was scheduled with. A step the event wakes in the timer's own saga is
written with the timer's stamp (fired) in one commit, while this pass's claim still holds
the timer: the timer's effect on its own saga is exactly once. Every other receiver gets
the event at least once. The pass commits what it fired at least every 100 ms (see
:mod:`bsft_saga.delivery.passes`), so a pass killed at any moment fires again only the
timers of its last commit group.

A timer whose receivers raise discards its step's writes, counts a failed attempt and waits
``RETRY_BACKOFF`` doubling up to ``MAX_RETRY_DELAY``; at ``MAX_DISPATCH_ATTEMPTS`` it is
dead-lettered. The mechanism is :mod:`bsft_saga.delivery`, shared with the outbox.
"""

from __future__ import annotations

import operator
from dataclasses import astuple, dataclass
from datetime import datetime

from bsft_saga.conf import saga_settings
from bsft_saga.delivery.passes import run_pass
from bsft_saga.delivery.report import DeliveryReport
from bsft_saga.timeouts.channel import TIMERS


@dataclass(frozen=True)
class DrainReport:
    """What one pass did with timers: a :class:`~bsft_saga.delivery.report.DeliveryReport`
    in the timers' words (a delivered timer *fired*).

    ``unclaimed``: due rows another dispatcher or a cancellation took. ``failed`` counts
    attempts that failed and wait for their retry: they are reported, but they are not work
    that calls for another pass right away.
    """

    fired: int = 0
    missed: int = 0
    failed: int = 0
    dead_lettered: int = 0
    unclaimed: int = 0

    @classmethod
    def of(cls, report: DeliveryReport) -> DrainReport:
        return cls(
            fired=report.delivered,
            missed=report.missed,
            failed=report.failed,
            dead_lettered=report.dead_lettered,
            unclaimed=report.unclaimed,
        )

    def __add__(self, other: DrainReport) -> DrainReport:
        return DrainReport(*map(operator.add, astuple(self), astuple(other)))

    @property
    def settled(self) -> int:
        """Timers that stopped being due in this pass."""
        return self.fired + self.missed + self.dead_lettered + self.unclaimed

    def __str__(self) -> str:
        return (
            f"fired={self.fired} missed={self.missed} failed={self.failed} "
            f"dead_lettered={self.dead_lettered} unclaimed={self.unclaimed}"
        )


def drain_due(*, batch_size: int | None = None, now: datetime | None = None) -> DrainReport:
    """Run one timer pass and report what it did.

    Safe to run from many processes at once: concurrent passes claim disjoint rows. A
    failing timer is counted, logged and retried after its back-off (or dead-lettered); it
    never stops the pass. A timer whose receivers cost the pass its database connection is
    charged a failed attempt and tried alone next time; the pass reconnects and goes on.
    ``KeyboardInterrupt``/``SystemExit`` (a shutdown) and a database that stays unreachable
    escape; the claimed rows are then given back: at once after a shutdown, and after a lost
    connection by the next pass of this process that reaches the database (which then also
    counts, in ``fired``, rows whose commit turned out to have happened). A process killed
    outright leaves them to the lease.
    """
    limit = batch_size or saga_settings.delivery.batch_size
    return DrainReport.of(run_pass(TIMERS, limit=limit, now=now))
