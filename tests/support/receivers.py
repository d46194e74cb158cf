"""Plain receivers of ``event_published`` for tests that watch what was delivered.

The ``record`` fixture (tests/support/timer_fixtures.py) connects a
:class:`~tests.testapp.timer_flows.Recorder` for a whole test; :func:`receiving` does the
same for one block.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from bsft_saga import Envelope
from bsft_saga.signals import event_published


@contextmanager
def receiving(event_cls: type, *, fail: bool = False) -> Iterator[list[Envelope]]:
    """Collect the envelopes a plain receiver of ``event_cls`` gets inside the block;
    ``fail``: it raises each time, as a receiver whose service is down would."""
    received: list[Envelope] = []

    def on_event(sender: type, *, envelope: Envelope, **kwargs: Any) -> None:
        received.append(envelope)
        if fail:
            raise ConnectionError("warehouse unreachable")

    event_published.connect(on_event, sender=event_cls, weak=False)
    try:
        yield received
    finally:
        event_published.disconnect(on_event, sender=event_cls)
