"""Flows exercised by the engine tests."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import connection

from bsft_saga import SagaContext, SagaFlow
from bsft_saga.flows import SagaBuilderFactory
from tests.testapp.engine_events import (
    DeadlineProbeFinished,
    DeadlineProbeStarted,
    ProbeEcho,
    ProbeNext,
    ProbeStarted,
    ReminderDue,
    ReminderRequested,
)
from tests.testapp.events import (
    AsyncStarted,
    BadKeyEvent,
    FailingNext,
    FailingStarted,
    OrderCanceled,
    OrderPlaced,
    OrderShipped,
    Ping,
    ReserveStock,
    StockReserved,
    Tick,
)


@dataclass
class OrderState:
    total: Decimal = Decimal("0")
    reserved: bool = False
    canceled: bool = False
    big_order: bool = False
    small_order: bool = False
    shipped: bool = False
    log: list[str] = field(default_factory=list)


def _record_total(ctx: SagaContext[OrderState], e: OrderPlaced) -> None:
    ctx.state.total = e.total
    ctx.state.log.append("placed")
    ctx.publish(ReserveStock(e.order_id))


def _on_reserved_or_canceled(
    ctx: SagaContext[OrderState], e: StockReserved | OrderCanceled
) -> None:
    ctx.state.reserved = isinstance(e, StockReserved)
    ctx.state.canceled = isinstance(e, OrderCanceled)
    ctx.state.log.append(type(e).__name__)
    if ctx.state.canceled:
        ctx.mark_complete()


class OrderFlow(SagaFlow):
    saga_type = "tests.order"

    def configure(self, factory: SagaBuilderFactory) -> None:
        (
            factory.with_state(OrderState)
            .start_with(OrderPlaced, key=lambda e: e.order_id)
            .then(_record_total)
            .wait_for(StockReserved, key=lambda e: e.order_id)
            .or_(OrderCanceled, key=lambda e: e.order_id)
            .then(_on_reserved_or_canceled)
            .when(
                lambda ctx, e: ctx.state.total >= 100,
                lambda ctx, e: setattr(ctx.state, "big_order", True),
            )
            .when_not(
                lambda ctx, e: ctx.state.total >= 100,
                lambda ctx, e: setattr(ctx.state, "small_order", True),
            )
            .wait_for(OrderShipped, key=lambda e: e.order_id)
            .then(lambda ctx, e: setattr(ctx.state, "shipped", True))
            .complete()
        )


@dataclass
class CounterState:
    count: int = 0
    seen: list[int] = field(default_factory=list)


COUNTER_STEPS = 1000


def _count(ctx: Any, e: Tick) -> None:
    ctx.state.count += 1
    ctx.state.seen.append(e.n)


class CounterFlow(SagaFlow):
    """Every Tick for a counter id is one step: the concurrency tests count them."""

    saga_type = "tests.counter"

    def configure(self, factory: SagaBuilderFactory) -> None:
        builder = factory.with_state(CounterState).start_with(Tick, key=lambda e: e.counter_id)
        builder.then(_count)
        for _ in range(COUNTER_STEPS):
            builder.wait_for(Tick, key=lambda e: e.counter_id).then(_count)
        builder.build()


@dataclass
class PingState:
    pings: int = 0


class SingleInstanceFlow(SagaFlow):
    """No key: the flow has a single instance."""

    saga_type = "tests.single"

    def configure(self, factory: SagaBuilderFactory) -> None:
        (
            factory.with_state(PingState)
            .start_with(Ping)
            .then(lambda ctx, e: setattr(ctx.state, "pings", ctx.state.pings + 1))
            .wait_for(Ping)
            .then(lambda ctx, e: setattr(ctx.state, "pings", ctx.state.pings + 1))
            .complete()
        )


@dataclass
class AsyncState:
    steps: list[str] = field(default_factory=list)


async def _async_body(ctx: SagaContext[AsyncState], e: AsyncStarted) -> None:
    await asyncio.sleep(0)
    ctx.state.steps.append(f"async:{e.job_id}")


class AsyncBodyFlow(SagaFlow):
    saga_type = "tests.async"

    def configure(self, factory: SagaBuilderFactory) -> None:
        (
            factory.with_state(AsyncState)
            .start_with(AsyncStarted, key=lambda e: e.job_id)
            .then(_async_body)
            .then(lambda ctx, e: ctx.state.steps.append("sync"))
            .build()
        )


class StatelessFlow(SagaFlow):
    saga_type = "tests.stateless"

    def configure(self, factory: SagaBuilderFactory) -> None:
        factory.stateless().start_with(OrderShipped, key=lambda e: e.order_id).build()


class BadKeyFlow(SagaFlow):
    """Its key returns an int: a TypeError at run time naming the flow and the step."""

    saga_type = "tests.bad-key"

    def configure(self, factory: SagaBuilderFactory) -> None:
        factory.stateless().start_with(BadKeyEvent, key=lambda e: e.number).complete()


@dataclass
class FailingState:
    attempts: int = 0
    tags: list[str] = field(default_factory=list)


class StepFailed(RuntimeError):
    pass


def _maybe_fail(ctx: Any, e: FailingStarted | FailingNext) -> None:
    ctx.state.attempts += 1
    ctx.publish(ReserveStock(e.job_id))
    ctx.schedule_timeout("never", timedelta(hours=1), ReserveStock(e.job_id))
    if getattr(e, "fail", False) or "fail" in getattr(e, "tags", []):
        raise StepFailed(f"step failed for {e.job_id}")


class FailingFlow(SagaFlow):
    saga_type = "tests.failing"

    def configure(self, factory: SagaBuilderFactory) -> None:
        (
            factory.with_state(FailingState)
            .start_with(FailingStarted, key=lambda e: e.job_id)
            .then(_maybe_fail)
            .wait_for(FailingNext, key=lambda e: e.job_id)
            .then(lambda ctx, e: ctx.state.tags.extend(e.tags))
            .then(_maybe_fail)
            .build()
        )


@dataclass
class ProbeState:
    """What the step context looked like to the last body that ran."""

    saga_id: str = ""
    correlation_key: str | None = None
    message_id: str = ""
    event_type: str = ""
    correlation_id: str | None = None
    now: datetime | None = None
    in_atomic_block: bool | None = None
    steps: int = 0


def _probe(ctx: SagaContext[ProbeState], e: ProbeStarted | ProbeNext) -> None:
    if e.probe_id.startswith("unencodable"):
        # An int where ProbeEcho.kind is a str: ctx.publish raises TypeError in the body.
        ctx.publish(ProbeEcho(e.probe_id, kind=len(e.probe_id)))  # type: ignore[arg-type]
    ctx.state.saga_id = str(ctx.saga_id)
    ctx.state.correlation_key = ctx.correlation_key
    ctx.state.message_id = str(ctx.envelope.message_id)
    ctx.state.event_type = ctx.envelope.event_type
    ctx.state.correlation_id = ctx.envelope.correlation_id
    ctx.state.now = ctx.now
    # The engine promises that a body never runs inside a transaction it opened.
    ctx.state.in_atomic_block = connection.in_atomic_block
    ctx.state.steps += 1
    ctx.publish(ProbeEcho(e.probe_id, "forward"))
    ctx.publish(ProbeEcho(e.probe_id, "compensation"), ignore_deadline=True)


class ContextProbeFlow(SagaFlow):
    """Records the step context in its state and publishes two echoes per step."""

    saga_type = "tests.engine.context-probe"

    def configure(self, factory: SagaBuilderFactory) -> None:
        (
            factory.with_state(ProbeState)
            .start_with(ProbeStarted, key=lambda e: e.probe_id)
            .then(_probe)
            .wait_for(ProbeNext, key=lambda e: e.probe_id)
            .then(_probe)
            .build()
        )


@dataclass
class DeadlineProbeState:
    expired: bool = False
    finished: bool = False


def _publish_echoes(ctx: Any, e: DeadlineProbeStarted) -> None:
    ctx.publish(ProbeEcho(e.probe_id, "forward"))
    ctx.publish(ProbeEcho(e.probe_id, "compensation"), ignore_deadline=True)


def _deadline_probe_expired(ctx: Any, e: Any) -> None:
    ctx.state.expired = True
    ctx.mark_complete()


DEADLINE_PROBE_BUDGET = timedelta(hours=2)


class DeadlineProbeFlow(SagaFlow):
    """``with_deadline``: its steps' events carry start + 2 h; ``on_expired`` completes it."""

    saga_type = "tests.engine.deadline-probe"

    def configure(self, factory: SagaBuilderFactory) -> None:
        (
            factory.with_state(DeadlineProbeState)
            .with_deadline(DEADLINE_PROBE_BUDGET, on_expired=_deadline_probe_expired)
            .start_with(DeadlineProbeStarted, key=lambda e: e.probe_id)
            .then(_publish_echoes)
            .wait_for(DeadlineProbeFinished, key=lambda e: e.probe_id)
            .then(lambda ctx, e: setattr(ctx.state, "finished", True))
            .complete()
        )


REMINDER_DELAY = timedelta(minutes=1)


class ReminderFlow(SagaFlow):
    """Its own timer's event wakes its second step, which completes it."""

    saga_type = "tests.engine.reminder"

    def configure(self, factory: SagaBuilderFactory) -> None:
        (
            factory.stateless()
            .start_with(ReminderRequested, key=lambda e: e.reminder_id)
            .then(
                lambda ctx, e: ctx.schedule_timeout(
                    "remind", REMINDER_DELAY, ReminderDue(e.reminder_id)
                )
            )
            .wait_for(ReminderDue, key=lambda e: e.reminder_id)
            .complete()
        )


FLOWS: list[type[SagaFlow]] = [
    OrderFlow,
    CounterFlow,
    SingleInstanceFlow,
    AsyncBodyFlow,
    StatelessFlow,
    BadKeyFlow,
    FailingFlow,
    ContextProbeFlow,
    DeadlineProbeFlow,
    ReminderFlow,
]
