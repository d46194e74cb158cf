"""The ``@event`` registry: stable persisted type names for event classes."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from bsft_saga.events.codec import check_dataclass
from bsft_saga.exceptions import EventTypeConflict, UnknownEventType

E = TypeVar("E", bound=type)

_TYPE_ATTRIBUTE = "__saga_event_type__"
_lock = threading.Lock()
_by_name: dict[str, type] = {}


def event(name: str) -> Callable[[E], E]:
    """Register a dataclass as an event under a stable, persisted type name.

    The name is stored with timers and outbox rows, so it must outlive refactorings of
    the class. Registering a second class under a name already taken is an
    ``EventTypeConflict`` at import time. Fields the payload codec cannot round-trip are a
    ``TypeError`` here, not when a timer fires months later.
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError("@event needs a non-empty type name, e.g. @event('orders.placed')")

    def register(cls: E) -> E:
        check_dataclass(cls)
        with _lock:
            existing = _by_name.get(name)
            if existing is not None and _qualified_name(existing) != _qualified_name(cls):
                raise EventTypeConflict(
                    f"Event type {name!r} is already registered by {_qualified_name(existing)}; "
                    f"{_qualified_name(cls)} needs another name."
                )
            _by_name[name] = cls
        setattr(cls, _TYPE_ATTRIBUTE, name)
        return cls

    return register


def _qualified_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def event_type_of(obj_or_cls: Any) -> str:
    """Return the registered type name of an event instance or class."""
    cls = obj_or_cls if isinstance(obj_or_cls, type) else type(obj_or_cls)
    name = cls.__dict__.get(_TYPE_ATTRIBUTE)
    if name is None:
        raise TypeError(
            f"{_qualified_name(cls)} is not an event: decorate it with @event('some.name')"
        )
    return str(name)


def event_class(name: str) -> type[Any]:
    """Return the class registered under ``name``; ``UnknownEventType`` if there is none."""
    try:
        return _by_name[name]
    except KeyError:
        raise UnknownEventType(name) from None
