"""Fixtures shared by the timer tests (loaded by tests/conftest.py as a plugin)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from freezegun import freeze_time
from freezegun.api import FrozenDateTimeFactory

from tests.testapp.timer_flows import PROBE_ACTIONS, Recorder

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)  # a Monday

Action = Callable[[Any, Any], None]


@pytest.fixture
def clock() -> Iterator[FrozenDateTimeFactory]:
    """The clock frozen at ``T0``; tests move it with ``tick``/``move_to``."""
    with freeze_time(T0) as frozen:
        assert isinstance(frozen, FrozenDateTimeFactory)  # not ticking
        yield frozen


@pytest.fixture
def action(monkeypatch: pytest.MonkeyPatch) -> Callable[[Action], str]:
    """Register a ProbeFlow step body for this test; returns the name to put in the event."""

    def register(body: Action) -> str:
        name = f"action-{len(PROBE_ACTIONS)}"
        monkeypatch.setitem(PROBE_ACTIONS, name, body)
        return name

    return register


@pytest.fixture
def record() -> Iterator[Callable[..., Recorder]]:
    """Connect a ``Recorder`` for some event classes; disconnected after the test."""
    recorders: list[Recorder] = []

    def connect(*event_classes: type) -> Recorder:
        recorder = Recorder(*event_classes).connect()
        recorders.append(recorder)
        return recorder

    yield connect
    for recorder in recorders:
        recorder.disconnect()
