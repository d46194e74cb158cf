"""Flows whose steps publish an event that reaches the same saga again, synchronously: a
``meanwhile`` body that answers ``Echo`` with ``Echo`` (through ``ctx.publish``, delivered
after the window commits) and one that answers ``Shout`` with ``publish(Shout)`` from the
body (tests/events/test_nesting.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from bsft_saga import SagaContext, SagaFlow, publish
from bsft_saga.flows import SagaBuilderFactory
from tests.testapp.loop_events import Echo, EchoStarted, EchoStopped, Shout

#: When the timer that an echo saga's start schedules fires: its event is ``Echo(key, 1000)``.
KICK_AFTER = timedelta(minutes=1)


@dataclass
class EchoState:
    heard: int = 0


def _kick(ctx: SagaContext[EchoState], e: EchoStarted) -> None:
    ctx.schedule_timeout("kick", KICK_AFTER, Echo(e.key, 1000))


def _echo(ctx: SagaContext[EchoState], e: Echo) -> None:
    ctx.state.heard += 1
    if e.remaining > 0:
        ctx.publish(Echo(e.key, e.remaining - 1))


def _shout(ctx: SagaContext[EchoState], e: Shout) -> None:
    ctx.state.heard += 1
    if e.remaining > 0:
        publish(Shout(e.key, e.remaining - 1))


class EchoFlow(SagaFlow):
    """While it waits to be stopped, every ``Echo`` it hears publishes the next one."""

    saga_type = "tests.loop.echo"

    def configure(self, factory: SagaBuilderFactory) -> None:
        (
            factory.with_state(EchoState)
            .start_with(EchoStarted, key=lambda e: e.key)
            .then(_kick)
            .wait_for(EchoStopped, key=lambda e: e.key)
            .meanwhile(Echo, _echo, key=lambda e: e.key)
            .meanwhile(Shout, _shout, key=lambda e: e.key)
            .complete()
        )


FLOWS: list[type[SagaFlow]] = [EchoFlow]
