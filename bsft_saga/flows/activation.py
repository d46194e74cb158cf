"""Which flows take events: every registered flow, or only those a test activated.

``SagaHarness(flows=[...])`` narrows the set for its duration, so that a test of one flow
is not disturbed by the others reacting to the same events. Like the harness's frozen
clock, the narrowing holds for the whole process, in every thread.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_active: frozenset[str] | None = None  # None: every registered flow is active


def is_active(saga_type: str) -> bool:
    """Whether the flow ``saga_type`` takes events now."""
    active = _active
    return active is None or saga_type in active


@contextmanager
def only(saga_types: Iterable[str]) -> Iterator[None]:
    """Let only the flows ``saga_types`` take events inside the block (they nest: the
    innermost block wins, and the outer set is restored on exit)."""
    global _active
    narrowed = frozenset(saga_types)
    with _lock:
        previous, _active = _active, narrowed
    try:
        yield
    finally:
        with _lock:
            _active = previous
