"""The flows the model-based suite (tests/model/) drives through the public API.

Their behaviour is restated, plainly, by the model in tests/model/model.py: change one and
the other together.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from bsft_saga import SagaContext, SagaFlow
from bsft_saga.flows import SagaBuilderFactory
from tests.testapp.model_events import (
    ChainGate,
    ChainItem,
    ChainOpened,
    Nudge,
    TimedDone,
    TimedNote,
    TimedOpened,
    Watch,
)

#: Keys whose nudge timer's body raises (the suite's "break" and "fix" rules change it).
BROKEN: set[str] = set()

NUDGE_EVERY = timedelta(hours=1)
NUDGE_REPLACED = timedelta(hours=2)
MAX_NUDGES = 3
WATCH_AFTER = timedelta(hours=3)
TIMED_BUDGET = timedelta(hours=8)


@dataclass
class ChainState:
    items: list[int] = field(default_factory=list)


def _take(ctx: SagaContext[ChainState], e: ChainItem) -> None:
    ctx.state.items.append(e.n)


class ModelChainFlow(SagaFlow):
    """A gate, then two waits in a row that keep the same type early."""

    saga_type = "tests.model.chain"

    def configure(self, factory: SagaBuilderFactory) -> None:
        (
            factory.with_state(ChainState)
            .start_with(ChainOpened, key=lambda e: e.key)
            .wait_for(ChainGate, key=lambda e: e.key)
            .wait_for(ChainItem, key=lambda e: e.key, keep_early=True)
            .then(_take)
            .wait_for(ChainItem, key=lambda e: e.key, keep_early=True)
            .then(_take)
            .complete()
        )


@dataclass
class TimedState:
    notes: list[int] = field(default_factory=list)
    nudges: int = 0
    done: bool = False
    expired: bool = False
    #: Whether the watch timer's event carried no deadline (None: not seen yet).
    watch_without_deadline: bool | None = None


def _open(ctx: SagaContext[TimedState], e: TimedOpened) -> None:
    ctx.schedule_timeout("nudge", NUDGE_EVERY, Nudge(e.key))
    # Its event carries no deadline: the model checks what the step it wakes sees.
    ctx.schedule_timeout("watch", WATCH_AFTER, Watch(e.key), scope="saga", ignore_deadline=True)


def _note(ctx: SagaContext[TimedState], e: TimedNote) -> None:
    ctx.state.notes.append(e.n)
    if e.action == "cancel":
        ctx.cancel_timeout("nudge")
    elif e.action == "replace":
        ctx.schedule_timeout("nudge", NUDGE_REPLACED, Nudge(e.key))


def _nudge(ctx: SagaContext[TimedState], e: Nudge) -> None:
    if e.key in BROKEN:
        raise RuntimeError(f"the nudge of {e.key} is broken")
    ctx.state.nudges += 1
    if ctx.state.nudges < MAX_NUDGES:
        ctx.schedule_timeout("nudge", NUDGE_EVERY, Nudge(e.key))


def _done(ctx: SagaContext[TimedState], e: TimedDone) -> None:
    ctx.state.done = True


def _watched(ctx: SagaContext[TimedState], e: Watch) -> None:
    ctx.state.watch_without_deadline = ctx.envelope.deadline is None


def _expired(ctx: SagaContext[TimedState], e: object) -> None:
    ctx.state.expired = True
    ctx.mark_complete()


class ModelTimedFlow(SagaFlow):
    """Step- and saga-scoped timers, a meanwhile for notes and nudges, and a deadline."""

    saga_type = "tests.model.timed"

    def configure(self, factory: SagaBuilderFactory) -> None:
        (
            factory.with_state(TimedState)
            .with_deadline(TIMED_BUDGET, on_expired=_expired)
            .start_with(TimedOpened, key=lambda e: e.key)
            .then(_open)
            .wait_for(TimedDone, key=lambda e: e.key)
            .meanwhile(TimedNote, _note, key=lambda e: e.key)
            .meanwhile(Nudge, _nudge, key=lambda e: e.key)
            .then(_done)
            .wait_for(Watch, key=lambda e: e.key)
            .then(_watched)
            .complete()
        )


FLOWS: list[type[SagaFlow]] = [ModelChainFlow, ModelTimedFlow]
