"""Events of the flows the model-based suite drives (tests/testapp/model_flows.py)."""

from __future__ import annotations

from dataclasses import dataclass

from bsft_saga import event


@event("tests.model.chain-opened")
@dataclass(frozen=True)
class ChainOpened:
    key: str


@event("tests.model.gate")
@dataclass(frozen=True)
class ChainGate:
    key: str


@event("tests.model.item")
@dataclass(frozen=True)
class ChainItem:
    key: str
    n: int = 0


@event("tests.model.timed-opened")
@dataclass(frozen=True)
class TimedOpened:
    key: str


@event("tests.model.note")
@dataclass(frozen=True)
class TimedNote:
    key: str
    n: int = 0
    action: str = "note"  # "note", "cancel" (the nudge timer) or "replace" (it, by name)


@event("tests.model.done")
@dataclass(frozen=True)
class TimedDone:
    key: str


@event("tests.model.nudge")
@dataclass(frozen=True)
class Nudge:
    key: str


@event("tests.model.watch")
@dataclass(frozen=True)
class Watch:
    key: str
