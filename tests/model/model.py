"""A plain-Python model of what the public API should do with the flows of
tests/testapp/model_flows.py: as plain as docs/flows.md, docs/timeouts.md,
docs/deadlines.md and docs/guarantees.md say it.

No database, no engine: lists, dicts and the rules, written from the docs. The state
machine in test_api_model.py feeds every call it makes to the engine to this model too,
and compares the two after every step.
"""

from __future__ import annotations

import os
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from tests.testapp.model_flows import (
    MAX_NUDGES,
    NUDGE_EVERY,
    NUDGE_REPLACED,
    TIMED_BUDGET,
    WATCH_AFTER,
)

CHAIN = "tests.model.chain"
TIMED = "tests.model.timed"
DEADLINE = "bsft_saga.deadline"
KEEP_EARLY_FOR = timedelta(days=1)  # the default of ENGINE.KEEP_EARLY_FOR
MAX_KEPT = 3  # ENGINE.MAX_KEPT_EVENTS_PER_SAGA in the suite (per saga, or per key before it)

#: The chain flow's steps: 0 start, 1 gate, 2 and 3 take an item (both keep it early).
CHAIN_DONE = 4
#: The timed flow's steps: 0 start, 1 done (meanwhile: notes, nudges), 2 watch.
TIMED_DONE = 3

#: Rules of the required behaviour that the engine in the tree may not have yet. Each is
#: on by default; set one to False only while the helper implementing it has not landed,
#: and say so where the suite is run. Nothing else in the model depends on them.
RULES = {
    # Applying a kept event that reaches another keeping step applies that step's kept
    # events too, oldest first, until a step has none (or the saga completes).
    "kept_chain": True,
    # A kept event no later step awaits is discarded, counted ignored (not_awaited), when
    # the saga passes the last step that could take it; also when it completes.
    "kept_discarded_not_awaited": True,
    # An event for a key with no active instance is kept for KEEP_EARLY_FOR under
    # keep_early and applied when the saga that starts for the key reaches the step.
    "kept_before_start": True,
    # ctx.schedule_timeout(..., ignore_deadline=True): the timer's event has no deadline.
    "timer_ignore_deadline": True,
    # Rescheduling the deadline timer moves SagaInstance.deadline; canceling it is refused.
    "deadline_actions": True,
    # A delayed (or deferred) publish that repeats the message id of an event already
    # written to the outbox writes nothing: the message is delivered once, as first written.
    "outbox_repeat": True,
    # Keeping an event is no transition: the saga's version stays (the journal's versions
    # follow one another).
    "keeping_keeps_the_version": True,
}
# MODEL_RULES_OFF=kept_chain,deadline_actions switches rules off for one run (against an
# older tree, say); MODEL_RULES_ON=... switches one on.
for _name in filter(None, os.environ.get("MODEL_RULES_OFF", "").split(",")):
    RULES[_name] = False
for _name in filter(None, os.environ.get("MODEL_RULES_ON", "").split(",")):
    RULES[_name] = True


@dataclass
class Sent:
    """One event the suite published: what a repeat of its message id sends again."""

    kind: str  # chain_open, gate, item, timed_open, note, done
    key: str
    n: int
    action: str
    message_id: uuid.UUID


@dataclass
class Timer:
    seq: int  # the row's creation order: ties of due time fire in it
    name: str
    event: str  # "nudge", "watch", "deadline"
    scope: str
    due: datetime
    status: str = "pending"  # pending, fired, canceled, dead_lettered
    step: int = 1  # the step that scheduled it

    @property
    def pending(self) -> bool:
        return self.status == "pending"

    def __repr__(self) -> str:
        return f"<timer {self.name} #{self.seq} {self.status}, due {self.due:%d %H:%M}>"


@dataclass
class Kept:
    seq: int
    message_id: uuid.UUID
    n: int
    step: int
    kept_at: datetime


@dataclass
class Saga:
    flow: str
    key: str
    started_at: datetime
    db_id: uuid.UUID | None = None
    step: int = 1
    version: int = 1
    complete: bool = False
    terminated: bool = False
    deadline: datetime | None = None
    inbox: set[uuid.UUID] = field(default_factory=set)
    kept: list[Kept] = field(default_factory=list)
    timers: list[Timer] = field(default_factory=list)
    # (kind, step_before, step_after, version, via) per journal entry, in order
    journal: list[tuple[str, int | None, int | None, int | None, str]] = field(default_factory=list)
    # chain
    items: list[int] = field(default_factory=list)
    # timed
    notes: list[int] = field(default_factory=list)
    nudges: int = 0
    done: bool = False
    expired: bool = False
    watch_without_deadline: bool | None = None

    @property
    def label(self) -> str:
        return f"{self.flow}[{self.key}]"

    def __repr__(self) -> str:
        where = "complete" if self.complete else f"step {self.step}"
        return f"<saga {self.label} started {self.started_at:%d %H:%M}, {where}>"

    def pending_timer(self, name: str) -> Timer | None:
        return next((t for t in self.timers if t.name == name and t.pending), None)


@dataclass
class Delayed:
    seq: int
    sent: Sent
    deliver_at: datetime


def bytes_order(value: uuid.UUID) -> bytes:
    """PostgreSQL's, MySQL's and SQLite's order of UUIDs: their 16 bytes."""
    return value.bytes


def mariadb_order(value: uuid.UUID) -> bytes:
    """MariaDB's order of a version 1 to 5 UUID (the RFC 4122 variant): its five groups
    compared last first; any other UUID by its bytes."""
    b = value.bytes
    if b[8] >> 6 == 2 and 1 <= b[6] >> 4 <= 5:
        return b[10:16] + b[8:10] + b[6:8] + b[4:6] + b[0:4]
    return b


class Model:
    """What should have happened so far."""

    def __init__(self, now: datetime, id_order: Callable[[uuid.UUID], Any] = bytes_order) -> None:
        self.now = now
        #: The database's order of UUIDs, which breaks ties between outbox rows.
        self.id_order = id_order
        self.sagas: list[Saga] = []
        self.pre_kept: dict[str, list[Kept]] = {}  # chain key -> events kept before start
        self.delayed: list[Delayed] = []
        self.ignored: Counter[tuple[str, str]] = Counter()
        self.sent: list[Sent] = []
        self.broken: set[str] = set()
        self._seq = 0

    def seq(self) -> int:
        self._seq += 1
        return self._seq

    # -- lookups ------------------------------------------------------------------------------

    def active(self, flow: str, key: str) -> Saga | None:
        return next(
            (s for s in self.sagas if s.flow == flow and s.key == key and not s.complete), None
        )

    def _ignore(self, flow: str, reason: str) -> None:
        self.ignored[(flow, reason)] += 1

    # -- an event reaches the flows -----------------------------------------------------------

    def deliver(self, sent: Sent, *, via: str = "publish") -> None:
        flow = CHAIN if sent.kind in ("chain_open", "gate", "item") else TIMED
        saga = self.active(flow, sent.key)
        if sent.kind in ("chain_open", "timed_open"):
            if saga is None:
                if any(
                    s.flow == flow and s.key == sent.key and sent.message_id in s.inbox
                    for s in self.sagas
                ):
                    self._ignore(flow, "duplicate")  # a redelivered start event
                else:
                    self._start(flow, sent, via)
            elif sent.message_id in saga.inbox:
                self._ignore(flow, "duplicate")
            else:
                self._ignore(flow, "not_awaited")
            return
        if saga is None:
            if sent.kind == "item" and RULES["kept_before_start"]:
                rows = self.pre_kept.setdefault(sent.key, [])
                if len(rows) >= MAX_KEPT:
                    self._ignore(flow, "kept_limit")
                elif any(k.message_id == sent.message_id for k in rows):
                    self._ignore(flow, "duplicate")
                else:
                    rows.append(Kept(self.seq(), sent.message_id, sent.n, 2, self.now))
                return
            self._ignore(flow, "no_instance")
            return
        if sent.message_id in saga.inbox:
            self._ignore(flow, "duplicate")
            return
        if flow == CHAIN:
            self._chain_event(saga, sent, via)
        else:
            self._timed_event(saga, sent, via)

    def publish_many(self, sents: list[Sent]) -> list[str]:
        """``publish_many()`` is ``publish()`` of each event in turn; what became of each:
        ``started``, ``applied``, ``kept``, or ``ignored:<reason>``."""
        outcomes = []
        for sent in sents:
            sagas, ignored = len(self.sagas), self.ignored.copy()
            handled, kept = self._holding(sent.message_id)
            self.deliver(sent)
            now_handled, now_kept = self._holding(sent.message_id)
            if len(self.sagas) > sagas:
                outcomes.append("started")
            elif now_handled > handled:
                outcomes.append("applied")
            elif now_kept > kept:
                outcomes.append("kept")
            else:
                [((_flow, reason), _n)] = (self.ignored - ignored).items()
                outcomes.append(f"ignored:{reason}")
        return outcomes

    def _holding(self, message_id: uuid.UUID) -> tuple[int, int]:
        """How many sagas handled the message, and how many kept events hold it."""
        kept = [k for s in self.sagas for k in s.kept] + [
            k for rows in self.pre_kept.values() for k in rows
        ]
        return (
            sum(message_id in s.inbox for s in self.sagas),
            sum(k.message_id == message_id for k in kept),
        )

    def _start(self, flow: str, sent: Sent, via: str) -> None:
        saga = Saga(flow=flow, key=sent.key, started_at=self.now)
        saga.inbox.add(sent.message_id)
        self.sagas.append(saga)
        saga.journal.append(("started", None, 1, 1, via))
        if flow == TIMED:
            saga.deadline = self.now + TIMED_BUDGET
            # The deadline timer is the first row the start writes, then the step's.
            saga.timers.append(Timer(self.seq(), DEADLINE, "deadline", "saga", saga.deadline))
            saga.timers.append(Timer(self.seq(), "nudge", "nudge", "step", self.now + NUDGE_EVERY))
            saga.timers.append(Timer(self.seq(), "watch", "watch", "saga", self.now + WATCH_AFTER))
        elif RULES["kept_before_start"]:
            since = self.now - KEEP_EARLY_FOR
            rows = self.pre_kept.get(sent.key, [])
            saga.kept = [k for k in rows if k.kept_at >= since]
            self.pre_kept[sent.key] = [k for k in rows if k.kept_at < since]

    # -- the chain flow -----------------------------------------------------------------------

    def _chain_event(self, saga: Saga, sent: Sent, via: str) -> None:
        if sent.kind == "gate":
            if saga.step != 1:
                self._ignore(CHAIN, "not_awaited")
                return
            self._advance(saga, sent.message_id, via)
        else:  # item
            if saga.step == 1:  # kept for step 2
                if len(saga.kept) >= MAX_KEPT:
                    self._ignore(CHAIN, "kept_limit")  # never an error for the publisher
                elif any(k.message_id == sent.message_id for k in saga.kept):
                    self._ignore(CHAIN, "duplicate")
                else:
                    saga.kept.append(Kept(self.seq(), sent.message_id, sent.n, 2, self.now))
                    if not RULES["keeping_keeps_the_version"]:
                        saga.version += 1
                return
            saga.items.append(sent.n)
            self._advance(saga, sent.message_id, via)
        self._apply_kept(saga)

    def _advance(self, saga: Saga, message_id: uuid.UUID, via: str) -> None:
        before = saga.step
        saga.step += 1
        saga.version += 1
        saga.inbox.add(message_id)
        if saga.step == CHAIN_DONE:
            saga.complete = True
            saga.journal.append(("completed", before, saga.step, saga.version, via))
            self._discard_kept(saga)
            return
        saga.journal.append(("advanced", before, saga.step, saga.version, via))
        # Kept rows for a step the saga passed go to the next step awaiting their type.
        for row in saga.kept:
            if row.step < saga.step:
                row.step = saga.step  # steps 2 and 3 both await items

    def _apply_kept(self, saga: Saga) -> None:
        while not saga.complete and saga.step in (2, 3):
            ready = sorted(
                (k for k in saga.kept if k.step == saga.step), key=lambda k: (k.kept_at, k.seq)
            )
            if not ready:
                return
            row = ready[0]
            saga.kept.remove(row)
            saga.items.append(row.n)
            self._advance(saga, row.message_id, "kept")
            if not RULES["kept_chain"]:
                return

    def _discard_kept(self, saga: Saga) -> None:
        for _ in saga.kept:
            if RULES["kept_discarded_not_awaited"]:
                self._ignore(saga.flow, "not_awaited")
        saga.kept = []

    # -- the timed flow -----------------------------------------------------------------------

    def _timed_event(self, saga: Saga, sent: Sent, via: str) -> None:
        if sent.kind == "note" and saga.step == 1:
            saga.notes.append(sent.n)
            if sent.action == "cancel":
                timer = saga.pending_timer("nudge")
                if timer is not None:
                    timer.status = "canceled"
            elif sent.action == "replace":
                self._schedule(saga, "nudge", "nudge", "step", self.now + NUDGE_REPLACED)
            self._handled(saga, sent.message_id, via)
        elif sent.kind == "done" and saga.step == 1:
            saga.done = True
            for timer in saga.timers:
                if timer.pending and timer.scope == "step":
                    timer.status = "canceled"
            saga.step, saga.version = 2, saga.version + 1
            saga.inbox.add(sent.message_id)
            saga.journal.append(("advanced", 1, 2, saga.version, via))
        else:
            self._ignore(TIMED, "not_awaited")

    def _handled(self, saga: Saga, message_id: uuid.UUID, via: str) -> None:
        saga.version += 1
        saga.inbox.add(message_id)
        saga.journal.append(("handled", saga.step, saga.step, saga.version, via))

    def _schedule(self, saga: Saga, name: str, event: str, scope: str, due: datetime) -> None:
        timer = saga.pending_timer(name)
        if timer is not None:  # replaced in place: the same row, a new due time
            timer.due = due
        else:
            saga.timers.append(Timer(self.seq(), name, event, scope, due, step=saga.step))

    def _complete(self, saga: Saga) -> None:
        saga.complete = True
        for timer in saga.timers:
            if timer.pending:
                timer.status = "canceled"
        self._discard_kept(saga)

    def _fire(self, saga: Saga, timer: Timer) -> None:
        """The pass fires ``timer``: its event reaches the saga (exactly once)."""
        message_id = uuid.uuid4()  # a timer's message id is its own; no one repeats it
        if timer.event == "deadline":
            timer.status = "fired"
            saga.inbox.add(message_id)
            saga.expired = True
            saga.version += 1
            saga.journal.append(("expired", saga.step, saga.step, saga.version, "timer"))
            self._complete(saga)
            return
        if timer.event == "nudge" and saga.step == 1:
            if saga.key in self.broken:
                # MAX_DISPATCH_ATTEMPTS is 1 in the suite: the first failure gives it up.
                timer.status = "dead_lettered"
                saga.journal.append(("dead_lettered", None, None, None, "timer"))
                return
            timer.status = "fired"
            saga.nudges += 1
            if saga.nudges < MAX_NUDGES:
                self._schedule(saga, "nudge", "nudge", "step", self.now + NUDGE_EVERY)
            self._handled(saga, message_id, "timer")
            return
        if timer.event == "watch" and saga.step == 2:
            timer.status = "fired"
            saga.watch_without_deadline = True if RULES["timer_ignore_deadline"] else None
            saga.step, saga.version = TIMED_DONE, saga.version + 1
            saga.inbox.add(message_id)
            saga.journal.append(("completed", 2, TIMED_DONE, saga.version, "timer"))
            self._complete(saga)
            return
        # Its event woke no step: ignored by the flow, the timer fired all the same.
        timer.status = "fired"
        self._ignore(TIMED, "not_awaited")
        saga.journal.append(("timer_fired", None, None, None, "timer"))

    # -- time and passes ----------------------------------------------------------------------

    def drain(self) -> None:
        """Passes until nothing is due: timers (ready order), then delayed messages, then
        the events kept for a key whose saga did not start within KEEP_EARLY_FOR."""
        due = sorted(
            (
                (t.due, t.seq, s, t)
                for s in self.sagas
                for t in s.timers
                if t.pending and t.due <= self.now
            ),
            key=lambda x: (x[0], x[1]),
        )
        for _, _, saga, timer in due:
            if timer.pending and not saga.complete:  # an earlier one may have ended it
                self._fire(saga, timer)
        # Oldest deliver_at first; messages due at the same moment go in the order of
        # their message ids (the outbox row's key, as the database orders it), not in the
        # order they were published.
        ready = sorted(
            (d for d in self.delayed if d.deliver_at <= self.now),
            key=lambda d: (d.deliver_at, self.id_order(d.sent.message_id)),
        )
        for row in ready:
            self.delayed.remove(row)
            self.deliver(row.sent, via="outbox")
        cutoff = self.now - KEEP_EARLY_FOR
        for rows in self.pre_kept.values():
            for expired in [r for r in rows if r.kept_at < cutoff]:
                rows.remove(expired)
                self._ignore(CHAIN, "not_awaited")

    # -- operators ----------------------------------------------------------------------------

    def terminate(self, saga: Saga) -> bool:
        if saga.complete:
            return False
        saga.terminated = True
        saga.version += 1
        saga.journal.append(("terminated", saga.step, saga.step, saga.version, "operator"))
        self._complete(saga)
        return True

    def cancel(self, saga: Saga, timer: Timer) -> bool:
        if not timer.pending or (timer.event == "deadline" and RULES["deadline_actions"]):
            return False
        timer.status = "canceled"
        saga.journal.append(("timer_canceled", None, None, None, "operator"))
        return True

    def reschedule(self, saga: Saga, timer: Timer, when: datetime) -> bool:
        if not timer.pending:
            return False
        timer.due = when
        version = None
        if timer.event == "deadline" and RULES["deadline_actions"]:
            saga.deadline = when
            saga.version += 1
            version = saga.version
        saga.journal.append(("timer_rescheduled", None, None, version, "operator"))
        return True

    def fire_now(self, saga: Saga, timer: Timer) -> bool:
        if not timer.pending:
            return False
        timer.due = self.now
        saga.journal.append(("fired_now", None, None, None, "operator"))
        return True

    def requeue(self, saga: Saga, timer: Timer) -> bool:
        if (
            timer.status != "dead_lettered"
            or saga.complete
            or (timer.scope == "step" and saga.step > timer.step)
            or saga.pending_timer(timer.name) is not None
        ):
            return False
        timer.status = "pending"
        saga.version += 1
        saga.journal.append(("requeued", None, None, None, "operator"))
        return True
