"""How a step woken by a pass hands its writes to that pass instead of committing them.

A pass runs each row's receivers with no transaction open. The engine's receiver plans the
woken step and runs its bodies as for any event, but its persistence window is not written
there: it is *staged* with the pass (:func:`stager_for`), which writes it later in a short
commit together with the row's stamp and the windows of other rows (see
:mod:`bsft_saga.delivery.commit`). Only the envelope the pass is delivering is staged; an
event that a receiver publishes meanwhile is handled, and committed, as any other publish.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from bsft_saga.models import JournalVia


class LostRace(Exception):
    """A staged window found its saga changed since it was planned (or created first).

    Raised by :meth:`StagedWindow.lock` having written nothing (its first statement, the
    version check, matched no row): the pass drops the row's writes and delivers the row
    again, against fresh state.
    """


@dataclass(frozen=True)
class Advance:
    """The version-checked advance of an existing saga, as data: what
    ``sql.update_then_insert(model, values, where, then)`` writes.

    A pass writing a group of such windows writes their advances in one statement
    (``sql.update_then_insert_each``) instead of one :meth:`StagedWindow.lock` each.
    """

    model: type[Any]
    values: Mapping[str, Any]
    where: Mapping[str, Any]  # the primary key, and the version the plan read
    #: The rows written if the advance was: the inbox row and the journal entry.
    then: tuple[tuple[type[Any], Mapping[str, Any]], ...]


class StagedWindow(Protocol):
    """The writes of one woken step, written later by the pass that delivers its event."""

    saga_id: uuid.UUID
    saga_type: str
    correlation_key: str
    #: Whether the window inserts its instance (no row to lock yet: the key is locked).
    creates: bool

    def lock(self) -> None:
        """Write what locks the saga (its version-checked advance, or its insert); raise
        ``LostRace``, having written nothing, if it lost a race.

        The pass may run it without a savepoint of the row's own (a group written at
        once): a lost race must be found by a statement that then wrote nothing, and any
        other failure is an exception, after which the pass rolls back and writes again.
        """

    def advance(self) -> Advance | None:
        """What :meth:`lock` writes, as data, when it is the version-checked advance of an
        existing saga (``None`` otherwise): a pass may write it instead of calling
        :meth:`lock`, together with the advances of other windows."""

    def write(self) -> None:
        """Write the rest of the window (timers, outbox rows), after :meth:`lock` (or its
        :meth:`advance`)."""

    def lost_a_race(self) -> bool:
        """After an ``IntegrityError`` (rolled back): whether a concurrent write caused it."""


class Stager(Protocol):
    """What a pass (or ``publish_many``) offers the steps its rows (or events) wake."""

    @property
    def journal_via(self) -> JournalVia | None:
        """How the journal says the staged windows' events arrived; ``None``: by the row
        being delivered (a timer or an outbox row)."""

    def stage(self, window: StagedWindow) -> None:
        """Take ``window`` to write with the row being delivered."""

    def make_room(self, saga_type: str, correlation_key: str) -> bool:
        """Commit what the pass holds for the saga of this key, if anything.

        Returns whether it committed: a plan made before that commit read state older than
        the pass's own writes and must be made again.
        """


class _Delivering:
    __slots__ = ("known", "message_id", "stager")

    def __init__(self, message_id: uuid.UUID, stager: Stager, known: Any) -> None:
        self.message_id = message_id
        self.stager = stager
        self.known = known


_current: ContextVar[_Delivering | None] = ContextVar("bsft_saga_delivering", default=None)


@contextmanager
def delivering(message_id: uuid.UUID, stager: Stager, known: Any = None) -> Iterator[None]:
    """While the envelope ``message_id`` is sent, steps it wakes stage with ``stager``.

    ``known``: the lookup's answers read in advance for the steps the envelope wakes
    (``bsft_saga.engine.lookup.Answers``: what the pass read of the row's saga when it
    claimed the row, or what ``publish_many`` read for its group), or ``None``. The lookup
    takes each once (:func:`known`).
    """
    marker = _current.set(_Delivering(message_id, stager, known))
    try:
        yield
    finally:
        _current.reset(marker)


def stager_for(envelope: Any) -> Stager | None:
    """The pass that is delivering ``envelope``, or ``None`` (commit the window now)."""
    current = _current.get()
    if current is None or current.message_id != envelope.message_id:
        return None
    return current.stager


def known(message_id: uuid.UUID) -> Any:
    """The answers read in advance for the steps of the envelope ``message_id`` (see
    :func:`delivering`), or ``None``."""
    current = _current.get()
    if current is None or current.message_id != message_id:
        return None
    return current.known
