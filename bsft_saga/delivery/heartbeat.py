"""Dispatchers that report in: a process's identity and the heartbeat its passes write.

A process that runs passes for a living — ``drain_saga_timeouts --loop``, a Celery worker
running the drain task — runs them inside :func:`reporting`. Its passes then keep a
``SagaDispatcher`` row up to date (host, pid, kind, when it started, when it last passed,
how many rows it delivered, how many it holds), and every row its claims take names it in
``claimed_by``. Code that calls ``drain_due()`` or ``drain_round()`` itself, and the test
harness, report nothing and write no heartbeat: their claims name nobody.

What a heartbeat costs, per pass and never per row, only while a process reports:

- in the claim's transaction, one ``UPDATE`` of ``last_pass_at`` and ``claims`` (an
  ``INSERT`` the first time, and again if a purge pruned the row); a pass that claims
  nothing writes it at most once every :data:`REPORT_EVERY` seconds, so an idle loop still
  shows that it polls, for one small write per poll;
- at the end of a pass that claimed rows, one ``UPDATE`` adding what it delivered to
  ``delivered`` and setting ``claims`` back to what the process still holds (0 between
  passes).

A pass started while another of the same process is running (the outbox rows a commit
group staged, delivered right after it commits) counts its rows in the process's totals
and writes nothing of its own, unless the process has not reported for
:data:`REPORT_EVERY`.

The identity belongs to one process: a forked child that inherited its parent's gets one
of its own, since each is compared with ``os.getpid()``. A Celery worker is the exception
(:func:`shared_with_forks`): its pool children report as the worker, on the worker's row
(its pid, its start), since the worker is what runs the drain for as long as it lives. The
beat hands each drain task to one child, often the same one: an idle child of its own
would go stale while its worker is healthy, and a dead child's row would linger although
the worker replaced it.
"""

from __future__ import annotations

import contextvars
import logging
import os
import socket
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType

from django.db import DatabaseError, IntegrityError, transaction
from django.db.models import F

from bsft_saga import clock
from bsft_saga.models import DispatcherKind, SagaDispatcher

__all__ = [
    "REPORT_EVERY",
    "Beat",
    "Dispatcher",
    "current",
    "reporting",
    "shared_with_forks",
    "signed_off",
]

logger = logging.getLogger("bsft_saga.delivery")

#: Seconds (of real time) between two heartbeats of passes that claim nothing.
REPORT_EVERY = 1.0

_HOST_LENGTH = SagaDispatcher._meta.get_field("host").max_length or 255


@dataclass(eq=False)
class Dispatcher:
    """This process's identity as a dispatcher of one kind, and what it has not reported yet.

    ``held`` (rows its passes in progress claimed) and ``unreported`` (rows delivered since
    its last heartbeat) are changed under ``lock``: passes of several threads may share it.
    ``pid`` is the process its row names; ``process`` the one this object (its counters)
    belongs to: the same, except in a process forked from a dispatcher ``shared`` with its
    forks, which reports on its parent's row with counters of its own.
    """

    id: uuid.UUID
    kind: str
    host: str
    pid: int
    started_at: datetime
    held: int = 0
    unreported: int = 0
    passes: int = 0  # passes in progress
    reported_at: float | None = None  # clock.stopwatch() of the last heartbeat
    #: Whether processes forked from this one report as it (a Celery worker's pool).
    shared: bool = False
    process: int = field(default_factory=os.getpid)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def new(cls, kind: str) -> Dispatcher:
        return cls(
            id=uuid.uuid4(),
            kind=str(kind),
            host=socket.gethostname()[:_HOST_LENGTH],
            pid=os.getpid(),
            started_at=clock.now(),
        )

    def adopted(self) -> Dispatcher:
        """This dispatcher in a process forked from it: the same row, counters of its own
        (nothing held, nothing unreported), and not shared further."""
        return Dispatcher(
            id=self.id, kind=self.kind, host=self.host, pid=self.pid, started_at=self.started_at
        )

    def quiet(self) -> bool:
        """Whether it has not reported for :data:`REPORT_EVERY` (or ever)."""
        return self.reported_at is None or clock.stopwatch() - self.reported_at >= REPORT_EVERY

    def report(self) -> None:
        """Write the heartbeat: ``last_pass_at`` now, ``claims``, and ``delivered`` so far."""
        with self.lock:
            held, delivered = self.held, self.unreported
            self.unreported = 0
        try:
            _write(self, held=held, delivered=delivered)
        except BaseException:
            with self.lock:
                self.unreported += delivered
            raise
        self.reported_at = clock.stopwatch()


def _write(dispatcher: Dispatcher, *, held: int, delivered: int) -> None:
    now = clock.now()
    values = {"last_pass_at": now, "claims": held}
    if delivered:
        values["delivered"] = F("delivered") + delivered
    if SagaDispatcher.objects.filter(pk=dispatcher.id).update(**values):
        return
    # Its first heartbeat, or a purge pruned the row after the process had gone quiet.
    try:
        with transaction.atomic():  # a savepoint inside the claim's transaction
            SagaDispatcher.objects.create(
                id=dispatcher.id,
                host=dispatcher.host,
                pid=dispatcher.pid,
                kind=dispatcher.kind,
                started_at=dispatcher.started_at,
                last_pass_at=now,
                delivered=delivered,
                claims=held,
            )
    except IntegrityError:
        pass  # another thread of this process (or another child of its worker) wrote it first


_lock = threading.Lock()
_identities: dict[str, Dispatcher] = {}  # by kind
_reporting: contextvars.ContextVar[Dispatcher | None] = contextvars.ContextVar(
    "bsft_saga_dispatcher", default=None
)


def _identity(kind: str) -> Dispatcher:
    with _lock:
        dispatcher = _identities.get(kind)
        if dispatcher is not None and dispatcher.process != os.getpid():
            # Inherited through a fork. A child is not its parent (two processes writing
            # one row would hide a dead one), unless the parent is a worker whose pool
            # children run its passes.
            dispatcher = dispatcher.adopted() if dispatcher.shared else None
        if dispatcher is None:  # first use in this process
            dispatcher = Dispatcher.new(kind)
        _identities[kind] = dispatcher
        return dispatcher


@contextmanager
def reporting(kind: DispatcherKind | str, *, sign_off: bool = False) -> Iterator[Dispatcher]:
    """Run the passes of this block (this thread or task) as this process's dispatcher of
    ``kind``, writing its heartbeat.

    The identity is made once per process and kind, and kept by later blocks of the same
    process (a Celery worker that runs the drain task again and again is one dispatcher;
    its pool children report as it, see :func:`shared_with_forks`). ``sign_off``: delete
    its row when the block ends, as a process that stops cleanly does (it holds no claim by
    then): a row whose heartbeat went stale is then a process that died. A failure to
    delete is logged; the purge removes the row later.
    """
    dispatcher = _identity(str(kind))
    token = _reporting.set(dispatcher)
    try:
        yield dispatcher
    finally:
        _reporting.reset(token)
        if sign_off:
            signed_off(dispatcher.kind)


def shared_with_forks(kind: DispatcherKind | str) -> Dispatcher:
    """Make this process's dispatcher of ``kind`` now, and have the processes it forks from
    here on report as it: on its row, which names this process (its pid, its start).

    For a process whose children run its passes, a Celery worker and its pool: the row then
    stays fresh while any child passes, an idle child is not a dispatcher of its own that
    goes stale, and a child that dies and is replaced leaves no row behind. Its passes'
    ``claims`` are those of the child that reported last. Only this process deletes the row
    (:func:`signed_off`); a child that stops only forgets it. Writes nothing.
    """
    dispatcher = _identity(str(kind))
    dispatcher.shared = True
    return dispatcher


def signed_off(kind: DispatcherKind | str) -> None:
    """Forget this process's dispatcher of ``kind`` and delete its row, as a process that
    stops cleanly does (nothing if it has none). A failure to delete is logged: the purge
    removes the row later. A process that reports on its parent's row
    (:func:`shared_with_forks`) only forgets it: the row is its parent's to delete."""
    with _lock:
        dispatcher = _identities.get(str(kind))
        if dispatcher is None or dispatcher.process != os.getpid():
            return
        del _identities[dispatcher.kind]
    if dispatcher.pid != os.getpid():
        return
    try:
        SagaDispatcher.objects.filter(pk=dispatcher.id).delete()
    except DatabaseError:
        logger.warning(
            "bsft_saga: could not remove the heartbeat of %s %s:%s; the purge will",
            dispatcher.kind,
            dispatcher.host,
            dispatcher.pid,
            exc_info=True,
        )


def current() -> Dispatcher | None:
    """The dispatcher the passes of this thread (or task) report as; ``None`` outside
    :func:`reporting`, and in a child forked inside it."""
    dispatcher = _reporting.get()
    if dispatcher is None or dispatcher.process != os.getpid():
        return None
    return dispatcher


class Beat:
    """One pass's part in its dispatcher's heartbeat; silent when nobody reports.

    Used as a context manager around the pass: :meth:`claimed` inside the claim's
    transaction, :attr:`delivered` set before the block ends. A pass that raises only gives
    back its count of held rows: the next pass reports (the database may be what failed).
    """

    def __init__(self, dispatcher: Dispatcher | None = None) -> None:
        self.dispatcher = dispatcher
        self.claims = 0
        #: Rows the pass delivered; set by the pass before it ends.
        self.delivered = 0
        self._outermost = False

    @classmethod
    def of_this_process(cls) -> Beat:
        """The beat of a pass of :func:`current` (silent when it is ``None``)."""
        return cls(current())

    @property
    def claimer(self) -> uuid.UUID | None:
        """What the claim writes in ``claimed_by``: the dispatcher's id, or ``None``."""
        return None if self.dispatcher is None else self.dispatcher.id

    def __enter__(self) -> Beat:
        dispatcher = self.dispatcher
        if dispatcher is not None:
            with dispatcher.lock:
                dispatcher.passes += 1
                self._outermost = dispatcher.passes == 1
        return self

    def claimed(self, rows: int) -> None:
        """Count ``rows`` claimed by the pass as held; report them (in the claim's
        transaction) unless the pass is nested, or claimed nothing and the dispatcher has
        reported within :data:`REPORT_EVERY`."""
        dispatcher = self.dispatcher
        if dispatcher is None:
            return
        with dispatcher.lock:
            dispatcher.held += rows
            self.claims += rows
        if (rows and self._outermost) or dispatcher.quiet():
            dispatcher.report()

    def claim_undone(self, rows: int) -> None:
        """Take back :meth:`claimed` of ``rows`` whose claim's transaction rolled back."""
        dispatcher = self.dispatcher
        if dispatcher is None or not rows:
            return
        with dispatcher.lock:
            dispatcher.held -= rows
            self.claims -= rows

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        dispatcher = self.dispatcher
        if dispatcher is None:
            return
        with dispatcher.lock:
            dispatcher.passes -= 1
            dispatcher.held -= self.claims
            if exc_type is not None:
                return
            dispatcher.unreported += self.delivered
            due = (self.claims and self._outermost) or (
                dispatcher.unreported and dispatcher.passes == 0
            )
        if due:
            dispatcher.report()
