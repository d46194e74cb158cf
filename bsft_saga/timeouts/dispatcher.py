"""``drain_due()``: one dispatch pass over due timers.

A pass claims a batch of due timers (oldest first, at most ``BATCH_SIZE``; a timer waiting
out its retry back-off is not due before ``next_attempt_at``), applies the catch-up policy,
then fires the rest in **one transaction**, each timer in a savepoint: the timer is stamped
fired while this pass's claim still holds it, and its event is published under the
correlation id it was scheduled with. A step the event wakes commits with the batch, so a
timer's effect on its own saga and its stamp are one commit: exactly once. Every other
receiver gets the event at least once (a batch that does not commit is fired again).

A timer whose receivers raise rolls back alone (its saga's step with it), counts a failed
attempt and waits ``RETRY_BACKOFF`` doubling up to ``MAX_RETRY_DELAY``; at
``MAX_DISPATCH_ATTEMPTS`` it is dead-lettered. The mechanism is :mod:`bsft_saga.delivery`,
shared with the outbox.
"""

from __future__ import annotations

import logging
import operator
import uuid
from dataclasses import astuple, dataclass
from datetime import datetime

from django.db import transaction

from bsft_saga import clock, telemetry
from bsft_saga.conf import saga_settings
from bsft_saga.delivery import recovery
from bsft_saga.delivery.batch import Outcome, claim, count_outcomes, deliver
from bsft_saga.models import SagaTimeout, TimeoutOutcome
from bsft_saga.timeouts.catch_up import select_missed
from bsft_saga.timeouts.channel import TIMERS

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DrainReport:
    """What one pass did. ``unclaimed``: due rows another dispatcher or a cancellation took.

    ``failed`` counts attempts that failed and wait for their retry: they are reported,
    but they are not work that calls for another pass right away.
    """

    fired: int = 0
    missed: int = 0
    failed: int = 0
    dead_lettered: int = 0
    unclaimed: int = 0

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
    """Run one dispatch pass and report what it did.

    Safe to run from many processes at once: concurrent passes claim disjoint rows. A
    failing timer is counted, logged and retried after its back-off (or dead-lettered); it
    never stops the pass. ``KeyboardInterrupt``/``SystemExit`` (a shutdown) and a lost
    database connection escape; the batch then rolls back and its claimed rows are given
    back: at once after a shutdown, and after a lost connection by the next pass of this
    process that reaches the database (which then also counts, in ``fired``, rows whose
    batch turned out to have committed). A process killed outright leaves them to the lease.
    """
    config = saga_settings.timeouts
    moment = now or clock.now()
    recovered = recovery.give_back(TIMERS) if recovery.waiting(TIMERS) else recovery.GivenBack()
    token = uuid.uuid4()
    with recovery.guarding(TIMERS, token):
        claimed = claim(
            TIMERS,
            limit=batch_size or config.batch_size,
            token=token,
            now=moment,
            lease=config.claim_lease,
            max_attempts=config.max_dispatch_attempts,
        )
        rows = claimed.rows
        if not rows:
            return DrainReport(fired=recovered.delivered, dead_lettered=len(claimed.dead_lettered))
        # The policy reads before the batch's transaction opens: on SQLite a transaction
        # that reads first and writes later can be refused the write lock.
        missed_ids = select_missed(rows, config, moment)
        with transaction.atomic():
            missed = _stamp_missed([row for row in rows if row.pk in missed_ids], token)
            delivered = deliver(
                TIMERS, [row for row in rows if row.pk not in missed_ids], token, config
            )
    for row in missed:
        telemetry.count("timeout.missed", row.saga.saga_type)
    count_outcomes(TIMERS, delivered)
    return DrainReport(
        fired=recovered.delivered + delivered.count(Outcome.DELIVERED),
        missed=len(missed),
        failed=delivered.count(Outcome.FAILED),
        dead_lettered=len(claimed.dead_lettered) + delivered.count(Outcome.DEAD_LETTERED),
        unclaimed=len(missed_ids) - len(missed) + delivered.count(Outcome.UNCLAIMED),
    )


def _stamp_missed(rows: list[SagaTimeout], token: uuid.UUID) -> list[SagaTimeout]:
    """Retire ``rows`` as missed (one statement); return those this pass still held."""
    if not rows:
        return []
    ids = [row.pk for row in rows]
    # Write first, then read which rows were ours (a read first could cost SQLite's lock).
    TIMERS.held(token).filter(pk__in=ids).update(
        dispatched_at=clock.now(), outcome=TimeoutOutcome.MISSED, claimed_until=None
    )
    stamped = set(
        SagaTimeout.objects.filter(
            pk__in=ids, claim_token=token, outcome=TimeoutOutcome.MISSED
        ).values_list("pk", flat=True)
    )
    return [row for row in rows if row.pk in stamped]
