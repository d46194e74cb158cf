"""The ``@event`` registry: stable persisted type names for event classes.

Each class has one primary name, which every new timer and outbox row stores, and any
number of aliases: names an earlier release stored, which still decode to the class. A
name claimed by two classes is not an import error (a half-deployed rename must not stop
a process from starting); the first class keeps it and ``manage.py check`` reports the
conflict (``bsft_saga.E017``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from bsft_saga.events.codec import check_dataclass
from bsft_saga.exceptions import UnknownEventType

E = TypeVar("E", bound=type)

_TYPE_ATTRIBUTE = "__saga_event_type__"

#: The longest type name a timer or an outbox row stores (their ``event_type`` column).
MAX_TYPE_NAME_LENGTH = 200
#: Type names under this prefix belong to bsft_saga (the deadline event): only bsft_saga
#: itself sends them, never ``publish()``.
OWNED_PREFIX = "bsft_saga."


@dataclass(frozen=True)
class NameConflict:
    """A type name that a second class claimed after another class had it."""

    name: str
    kept_by: str  # dotted path of the class that keeps the name
    claimed_by: str  # dotted path of the class that was refused it
    claimed_as: str  # "name" or "alias": how the refused class declared it


class EventRegistry:
    """Event classes by every name they answer to (primary names and aliases)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_name: dict[str, type] = {}
        self._conflicts: dict[tuple[str, str], NameConflict] = {}

    def register(self, cls: type, name: str, aliases: tuple[str, ...]) -> None:
        """Map ``name`` and each alias to ``cls``; a name another class holds stays with it.

        Registering the same class again (a module imported twice) replaces the earlier
        registration instead of conflicting with it.
        """
        qualified = qualified_name(cls)
        with self._lock:
            for claimed, kind in ((name, "name"), *((alias, "alias") for alias in aliases)):
                holder = self._by_name.get(claimed)
                if holder is None or qualified_name(holder) == qualified:
                    self._by_name[claimed] = cls
                    self._conflicts.pop((claimed, qualified), None)
                else:
                    self._conflicts[(claimed, qualified)] = NameConflict(
                        name=claimed,
                        kept_by=qualified_name(holder),
                        claimed_by=qualified,
                        claimed_as=kind,
                    )

    def lookup(self, name: str) -> type[Any]:
        try:
            return self._by_name[name]
        except KeyError:
            raise UnknownEventType(name) from None

    def known_names(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._by_name)

    def conflicts(self) -> tuple[NameConflict, ...]:
        with self._lock:
            return tuple(self._conflicts.values())


#: The process-wide registry that ``@event`` fills.
event_registry = EventRegistry()


def event(name: str, *, aliases: Iterable[str] = ()) -> Callable[[E], E]:
    """Register a dataclass as an event under a stable, persisted type name.

    The name is stored with timers and outbox rows, so it must outlive refactorings of
    the class. ``aliases`` are names that earlier releases stored: rows under an alias
    decode to this class, and their envelope carries ``name``; new rows store ``name``.
    A name or alias another class already holds stays with that class, and
    ``manage.py check`` reports the conflict. Fields the payload codec cannot round-trip
    are a ``TypeError`` here, not when a timer fires months later; a name or alias longer
    than ``MAX_TYPE_NAME_LENGTH`` (200) characters is a ``ValueError``.
    """
    _check_name(name, "@event needs a non-empty type name, e.g. @event('orders.placed')")
    if isinstance(aliases, str):
        raise TypeError(
            f"@event({name!r}, aliases=...) needs a tuple of names, got the string "
            f"{aliases!r}; write aliases=({aliases!r},)"
        )
    alias_names = tuple(aliases)
    for alias in alias_names:
        _check_name(alias, f"@event({name!r}): every alias must be a non-empty name")
    if name in alias_names or len(set(alias_names)) != len(alias_names):
        raise ValueError(
            f"@event({name!r}, aliases={alias_names!r}): each name may appear only once"
        )

    def register(cls: E) -> E:
        check_dataclass(cls)
        event_registry.register(cls, name, alias_names)
        setattr(cls, _TYPE_ATTRIBUTE, name)
        return cls

    return register


def _check_name(name: object, message: str) -> None:
    if not isinstance(name, str) or not name.strip():
        raise ValueError(message)
    # Stored with every timer and outbox row: a longer name would fail each publish on
    # PostgreSQL (and be stored whole by SQLite), so it fails once, here.
    if len(name) > MAX_TYPE_NAME_LENGTH:
        raise ValueError(
            f"@event: the type name {name[:40]!r}... is {len(name)} characters long; "
            f"timers and outbox rows store at most {MAX_TYPE_NAME_LENGTH}"
        )


def check_publishable(event_type: str, where: str) -> None:
    """``ValueError`` if ``event_type`` is one of bsft_saga's own (``OWNED_PREFIX``).

    Such an event acts on sagas by its fields alone (the deadline event names a saga id and
    type): published by anyone, it would run that saga's ``on_expired`` early, or another
    flow's against an unrelated instance. bsft_saga sends its own events itself.
    """
    if event_type.startswith(OWNED_PREFIX):
        raise ValueError(
            f"{where}: {event_type!r} is an event type of bsft_saga itself (names starting "
            f"with {OWNED_PREFIX!r}); only bsft_saga sends it"
        )


def qualified_name(cls: type) -> str:
    """``module.QualName`` of a class, as check messages and errors name it."""
    return f"{cls.__module__}.{cls.__qualname__}"


def event_type_of(obj_or_cls: Any) -> str:
    """Return the primary type name of an event instance or class."""
    cls = obj_or_cls if isinstance(obj_or_cls, type) else type(obj_or_cls)
    name = cls.__dict__.get(_TYPE_ATTRIBUTE)
    if name is None:
        raise TypeError(
            f"{qualified_name(cls)} is not an event: decorate it with @event('some.name')"
        )
    return str(name)


def event_class(name: str) -> type[Any]:
    """Return the class registered under ``name`` (a primary name or an alias).

    ``UnknownEventType`` if no class answers to it.
    """
    return event_registry.lookup(name)


def known_event_types() -> frozenset[str]:
    """Every name a stored row may carry and still decode: primary names and aliases."""
    return event_registry.known_names()
