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
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol


class LostRace(Exception):
    """A staged window found its saga changed since it was planned (or created first).

    Raised by :meth:`StagedWindow.write` having written nothing that its savepoint keeps:
    the pass rolls back the row's writes and delivers the row again, against fresh state.
    """


class StagedWindow(Protocol):
    """The writes of one woken step, written later by the pass that delivers its event."""

    saga_id: uuid.UUID
    saga_type: str
    correlation_key: str
    #: Whether the window inserts its instance (no row to lock yet: the key is locked).
    creates: bool

    def lock(self) -> None:
        """Write what locks the saga (its version-checked advance, or its insert), inside
        the caller's savepoint; ``LostRace`` if it lost a race."""

    def write(self) -> None:
        """Write the rest of the window (timers, outbox rows), after :meth:`lock`."""

    def lost_a_race(self) -> bool:
        """After an ``IntegrityError`` (rolled back): whether a concurrent write caused it."""


class Stager(Protocol):
    """What a pass offers the steps its rows wake."""

    def stage(self, window: StagedWindow) -> None:
        """Take ``window`` to write with the row being delivered."""

    def make_room(self, saga_type: str, correlation_key: str) -> bool:
        """Commit what the pass holds for the saga of this key, if anything.

        Returns whether it committed: a plan made before that commit read state older than
        the pass's own writes and must be made again.
        """


@dataclass(frozen=True)
class _Delivering:
    message_id: uuid.UUID
    stager: Stager


_current: ContextVar[_Delivering | None] = ContextVar("bsft_saga_delivering", default=None)


@contextmanager
def delivering(message_id: uuid.UUID, stager: Stager) -> Iterator[None]:
    """While the envelope ``message_id`` is sent, steps it wakes stage with ``stager``."""
    marker = _current.set(_Delivering(message_id, stager))
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
