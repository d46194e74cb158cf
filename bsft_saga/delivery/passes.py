"""One delivery pass over a channel: claim, run the rows' receivers, commit in groups.

1. **Claim** a batch of ready rows in a short transaction of its own
   (:func:`~bsft_saga.delivery.claim.claim`).
2. **Run** each row's receivers with no transaction open: its envelope goes to the
   ``event_published`` signal; a step it wakes plans and runs its bodies as for any event,
   and stages its window with the pass instead of committing it
   (:mod:`~bsft_saga.delivery.staging`).
3. **Commit** what has been delivered (windows and stamps in one transaction, in one lock
   order, each row on its own: :mod:`~bsft_saga.delivery.commit`) at least every
   :data:`~bsft_saga.delivery.commit.COMMIT_INTERVAL` of delivering, before a row whose
   saga already has writes waiting, and at the end of the batch. A row whose window lost
   a version race is delivered again (its receivers run again); a row whose receivers
   raised discards its writes and records a failed attempt.
4. **After each commit**, the outbox rows its steps staged are delivered the same way (by
   ``on_commit``).

So a saga is never left uncommitted behind its own receivers for longer than a commit
interval (or the one row being delivered, if that takes longer), no lock is held while user
code runs, and a pass killed at any moment repeats the receivers of the rows of its last
group only. The claim also reads what the steps its rows wake would look up first (their
sagas, whether they handled the row's message, whether ending their wait cancels a timer):
a step takes that answer instead of a query while it is fresh (one commit interval, and
only until the pass commits to its saga); one that is outdated loses its version check.

If the pass is running inside a caller's transaction (a test wrapped in one), its commits
are savepoints of that transaction and each row's receivers run in a savepoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import Counter, deque
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any, Generic

from django.db import connection, transaction

from bsft_saga import clock
from bsft_saga.conf import DeliverySettings, saga_settings
from bsft_saga.delivery import commit, heartbeat, recovery
from bsft_saga.delivery.channel import Channel, R
from bsft_saga.delivery.claim import claim
from bsft_saga.delivery.commit import CommitGroup, CommitInterval, Unit
from bsft_saga.delivery.failures import (
    failure_reason,
    lost_connection_reason,
    lost_the_connection,
    record_failure,
)
from bsft_saga.delivery.report import DeliveryReport, Outcome
from bsft_saga.delivery.staging import StagedWindow, delivering
from bsft_saga.events.sending import send_envelope
from bsft_saga.exceptions import SagaConcurrencyError

logger = logging.getLogger("bsft_saga.delivery")


def run_pass(
    channel: Channel[R],
    *,
    limit: int,
    now: datetime | None = None,
    only: Iterable[Any] | None = None,
) -> DeliveryReport:
    """Claim up to ``limit`` ready rows of ``channel`` (``only``: among these pks) and
    deliver them; report what became of them.

    Safe to run from many processes at once: concurrent passes claim disjoint rows. One
    failing row never stops the pass. ``KeyboardInterrupt``/``SystemExit`` and a database
    that stays unreachable escape; the rows still claimed are given back (see
    :mod:`~bsft_saga.delivery.recovery`).

    Inside :func:`~bsft_saga.delivery.heartbeat.reporting` the pass writes its process's
    heartbeat and its claims name the process.
    """
    wanted = None if only is None else list(only)
    with heartbeat.Beat.of_this_process() as beat:
        moment = now or clock.now()
        report = _claim_and_deliver(channel, beat, limit=limit, moment=moment, wanted=wanted)
        beat.delivered = report.delivered
    return report


def _claim_and_deliver(
    channel: Channel[R],
    beat: heartbeat.Beat,
    *,
    limit: int,
    moment: datetime,
    wanted: list[Any] | None,
) -> DeliveryReport:
    config = saga_settings.delivery
    recovered = recovery.give_back(channel) if recovery.waiting(channel) else recovery.GivenBack()
    token = uuid.uuid4()
    with recovery.guarding(channel, token) as guard:
        claimed = claim(
            channel,
            limit=limit,
            token=token,
            now=moment,
            lease=config.claim_lease,
            max_attempts=config.max_dispatch_attempts,
            only=wanted,
            beat=beat,
        )
        given_up = len(claimed.dead_lettered) + claimed.unreadable
        skipped = len(wanted) - len(claimed.rows) - given_up if wanted is not None else 0
        if not claimed.rows:
            return DeliveryReport(
                delivered=recovered.delivered, dead_lettered=given_up, unclaimed=skipped
            )
        token = claimed.token  # alone(token), if it took one row
        sorted_out = channel.sort_out(claimed.rows, token, moment)
        report = deliver_claimed(
            channel,
            sorted_out.to_deliver,
            token,
            guard=guard,
            check_first=sorted_out.committed,
            known=claimed.known,
        )
    return report + DeliveryReport(
        delivered=recovered.delivered,
        dead_lettered=given_up,
        unclaimed=skipped + sorted_out.unclaimed,
        missed=sorted_out.missed,
    )


def deliver_claimed(
    channel: Channel[R],
    rows: list[R],
    token: uuid.UUID,
    *,
    guard: recovery.Guard | None = None,
    check_first: bool = False,
    known: dict[Any, Any] | None = None,
) -> DeliveryReport:
    """Deliver ``rows``, which ``token`` claimed (each with its ``claimed_until``).

    ``known``: what the claim read of the rows' sagas, by row pk (``Claimed.known``), for
    the lookups of the steps they wake. A row's entry is used while it is fresh: for one
    commit interval after the claim, and only if the pass has committed nothing to that
    saga since.

    After each commit, and past half the lease, the pass checks which of the rows still to
    come it holds (renewing their lease in the second case): those canceled, replaced or
    taken over meanwhile are ``unclaimed`` and never published. So a batch of slow
    receivers keeps its rows, and a pass that hung past its lease publishes nothing it
    no longer holds.
    """
    delivery = _Pass(channel, token, saga_settings.delivery, guard or recovery.Guard())
    delivery.outdated = check_first
    delivery.known = dict(known or {})
    return delivery.run(rows)


def _renewal_time(rows: list[R], lease: timedelta) -> datetime:
    ends = min((row.claimed_until for row in rows if row.claimed_until), default=None)
    return ends - lease / 2 if ends is not None else datetime.max.replace(tzinfo=UTC)


class _Pass(Generic[R]):
    """Delivers one claimed batch; offers the engine a place to stage its windows."""

    #: The journal names the row delivered (a timer or an outbox row): ``staging.Stager``.
    journal_via = None

    def __init__(
        self,
        channel: Channel[R],
        token: uuid.UUID,
        config: DeliverySettings,
        guard: recovery.Guard,
    ) -> None:
        self.channel = channel
        self.token = token
        self.config = config
        self.guard = guard
        self.group: CommitGroup[R] = CommitGroup(channel, token)
        self.interval = CommitInterval()
        self.unit: Unit[R] | None = None  # the row whose receivers are running
        # Inside a caller's transaction each row's receivers run in a savepoint, so that a
        # failing one cannot abort that transaction, and each row is committed (a savepoint
        # too) right after them, so that no commit ever falls inside another row's savepoint.
        self.nested = connection.in_atomic_block
        self.queue: deque[R] = deque()
        #: Whether a commit happened since the pass last checked which rows it still holds
        #: (the claim itself is such a check).
        self.outdated = False
        self.conflicts: dict[Any, int] = {}
        #: What the claim read of the rows' sagas (``deliver_claimed``), until it expires or
        #: the pass commits to the saga.
        self.known: dict[Any, Any] = {}
        self.known_until = clock.stopwatch() + commit.COMMIT_INTERVAL
        self.committed_sagas: set[Any] = set()
        self.outcomes: Counter[Outcome] = Counter()
        self.counted: Counter[tuple[Outcome, str]] = Counter()

    # -- the batch ---------------------------------------------------------------------

    def run(self, rows: list[R]) -> DeliveryReport:
        self.queue.extend(rows)
        self.renew_at = _renewal_time(rows, self.config.claim_lease)
        while self.queue:
            self._deliver_queue()
            self._commit()  # rows whose windows lost a race come back to the queue
        for (outcome, saga_type), n in self.counted.items():
            self.channel.count(outcome, saga_type, n)
        return DeliveryReport(
            delivered=self.outcomes[Outcome.DELIVERED],
            failed=self.outcomes[Outcome.FAILED],
            dead_lettered=self.outcomes[Outcome.DEAD_LETTERED],
            unclaimed=self.outcomes[Outcome.UNCLAIMED],
        )

    def _refresh(self) -> None:
        """Before a commit group: drop the rows to come that are no longer this pass's.

        A commit of this pass (a step that ended a wait) or another process may have
        canceled or replaced a claimed row meanwhile: a canceled timer is never published.
        Past half the lease, the claims of the rows to come are renewed too, so a batch of
        slow receivers keeps its rows.
        """
        now = clock.now()
        held = self.channel.held(self.token).filter(pk__in=[row.pk for row in self.queue])
        if now >= self.renew_at:
            until = now + self.config.claim_lease
            held.update(claimed_until=until)
            self.renew_at = now + self.config.claim_lease / 2
        still = set(held.values_list("pk", flat=True))
        for row in list(self.queue):
            if row.pk not in still:
                self.queue.remove(row)
                self._count(row, Outcome.UNCLAIMED)
        self.outdated = False

    def _deliver_queue(self) -> None:
        while self.queue:
            self._put_a_free_row_first()
            row = self.queue[0]
            if self.group.holds_saga(self.channel.saga_of(row)) or self.interval.over():
                self._commit()
            if self.interval.started is None and (self.outdated or clock.now() >= self.renew_at):
                self._refresh()
                if not self.queue or self.queue[0] is not row:
                    continue
            self.queue.popleft()
            self._deliver(row)
            if self.nested or self.interval.over():
                self._commit()

    def _put_a_free_row_first(self) -> None:
        """Deliver first the earliest row whose saga has no writes waiting in the group.

        A saga's next row must be planned against its committed state, so reaching it means
        a commit; when a saga's timers are due together (the reminder and the final notice
        of one saga, side by side in the queue), that would be a commit every other row.
        Rows of other sagas go first instead, and the commit comes when no queued row is
        free (or the interval is over). Each saga's own rows keep their order: the row
        moved forward is the first of its saga in the queue.
        """
        group, saga_of = self.group, self.channel.saga_of
        if not group or not group.holds_saga(saga_of(self.queue[0])):
            return
        for index, row in enumerate(self.queue):
            if not group.holds_saga(saga_of(row)):
                del self.queue[index]
                self.queue.appendleft(row)
                return

    def _known(self, row: R) -> Any:
        """What the claim read of ``row``'s saga, if it still holds (taken once)."""
        known = self.known.pop(row.pk, None)
        if known is None or clock.stopwatch() >= self.known_until:
            return None
        if self.channel.saga_of(row) in self.committed_sagas:
            return None
        return known

    def _deliver(self, row: R) -> None:
        """Run ``row``'s receivers; keep its writes for the group, or record its failure."""
        channel = self.channel
        unit: Unit[R] = Unit(row)
        self.interval.begin()
        # Charged if the connection goes while it runs; left set when that escapes.
        self.guard.in_flight = row
        try:
            envelope = channel.envelope(row, self.token)
            self.unit = unit
            with (
                delivering(envelope.message_id, self, self._known(row)),
                channel.publishing(row),
                transaction.atomic() if self.nested else contextlib.nullcontext(),
            ):
                send_envelope(envelope)
        except (Exception, asyncio.CancelledError) as exc:
            # A cancellation raised by a woken step is that row's failure, not a shutdown.
            self.unit = None
            if lost_the_connection(exc):
                self._lost_connection(row, exc)
            else:
                with channel.written_with(row):
                    logger.exception("bsft_saga: %s failed", channel.describe(row))
                self._fail(row, failure_reason(exc))
            self.guard.in_flight = None
            return
        self.unit = None
        self.guard.in_flight = None
        if len(unit.windows) > 1:
            # Its event woke several sagas: committed alone, its windows in lock order.
            self._commit()
            self.group.add(unit)
            self._commit()
        else:
            self.group.add(unit)

    # -- what the engine's receiver calls (staging.Stager) -------------------------------

    def stage(self, window: StagedWindow) -> None:
        if self.unit is None:
            raise RuntimeError("a window was staged while no row was being delivered")
        self.unit.windows.append(window)

    def make_room(self, saga_type: str, correlation_key: str) -> bool:
        if not self.group.holds_key(saga_type, correlation_key):
            return False
        self._commit()
        return True

    # -- committing ----------------------------------------------------------------------

    def _commit(self) -> None:
        self.interval.reset()
        if not self.group:
            return
        in_flight = self.guard.in_flight
        self.committed_sagas |= self.group.sagas
        try:
            committed = self.group.commit()
        except BaseException:
            # The row whose receivers were running is the suspect, else the one being written.
            self.guard.in_flight = in_flight or self.group.writing
            raise
        self.outdated = True
        for row, outcome in committed.outcomes:
            self._count(row, outcome)
        for row, reason in committed.failed:
            self._fail(row, reason)
        for row in committed.conflicted:
            self._deliver_again(row)

    def _deliver_again(self, row: R) -> None:
        """Queue ``row`` again after its window lost a race, up to the engine's retry limit."""
        conflicts = self.conflicts.get(row.pk, 0) + 1
        if conflicts > saga_settings.engine.max_conflict_retries:
            error = SagaConcurrencyError(
                f"{self.channel.describe(row)} lost the optimistic-concurrency race "
                f"{conflicts} times; raise BSFT_SAGA['ENGINE']['MAX_CONFLICT_RETRIES'] or "
                "reduce contention on this instance"
            )
            self._fail(row, failure_reason(error))
            return
        self.conflicts[row.pk] = conflicts
        self.queue.append(row)

    def _fail(self, row: R, reason: str) -> None:
        self._count(row, record_failure(self.channel, row, self.token, reason, self.config))

    def _lost_connection(self, row: R, exc: BaseException) -> None:
        """The connection went while ``row``'s receivers ran: charge it, keep the others."""
        if self.nested:
            raise exc  # the caller's transaction went with it
        connection.close()  # the next statement reconnects
        self._commit()  # what the other rows delivered
        self._fail(row, lost_connection_reason(exc))

    def _count(self, row: R, outcome: Outcome) -> None:
        self.outcomes[outcome] += 1
        if outcome in self.channel.counters:
            self.counted[outcome, self.channel.saga_type(row)] += 1
