"""Events of the flows whose steps publish what reaches them again
(tests/testapp/loop_flows.py)."""

from __future__ import annotations

from dataclasses import dataclass

from bsft_saga import event


@event("tests.loop.echo-started")
@dataclass(frozen=True)
class EchoStarted:
    key: str


@event("tests.loop.echo-stopped")
@dataclass(frozen=True)
class EchoStopped:
    key: str


@event("tests.loop.echo")
@dataclass(frozen=True)
class Echo:
    """Heard meanwhile: the saga publishes it again while ``remaining`` is above zero."""

    key: str
    remaining: int = 0


@event("tests.loop.shout")
@dataclass(frozen=True)
class Shout:
    """Heard meanwhile: the body publishes it again at once, with ``publish()``."""

    key: str
    remaining: int = 0
