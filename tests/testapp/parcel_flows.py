"""A flow in two versions: the deploy tests start instances on each and finish them all.

Version 1 (``ParcelFlowV1``, no longer in ``saga_flows``) schedules the collection when
the parcel is ordered. Version 2 (``ParcelFlow``) inserts a weighing step before it and
keeps the weight in a new state class, so the two versions disagree on what step 1 is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from bsft_saga import SagaContext, SagaFlow
from tests.testapp.parcel_events import CollectionDue, ParcelDelivered, ParcelOrdered, ParcelWeighed

SAGA_TYPE = "tests.parcel"
COLLECTION_TIMER = "collection"
V1_COLLECTION_DELAY = timedelta(days=2)
V2_COLLECTION_DELAY = timedelta(days=1)
DELIVERY_BUDGET = timedelta(days=30)


def parcel_key(e: Any) -> str:
    return str(e.parcel_id)


def note(text: str, *, completes: bool = False) -> Any:
    """A body that appends ``text`` to the state's log (and completes the saga)."""

    def body(ctx: SagaContext[Any], e: Any) -> None:
        ctx.state.log.append(text)
        if completes:
            ctx.mark_complete()

    body.__name__ = text.replace(" ", "_")
    return body


# -- version 1 ------------------------------------------------------------------------------


@dataclass
class ParcelStateV1:
    log: list[str] = field(default_factory=list)


def schedule_collection_v1(ctx: SagaContext[ParcelStateV1], e: ParcelOrdered) -> None:
    ctx.state.log.append("v1 ordered")
    ctx.schedule_timeout(COLLECTION_TIMER, V1_COLLECTION_DELAY, CollectionDue(e.parcel_id))


class ParcelFlowV1(SagaFlow):
    saga_type = SAGA_TYPE
    version = 1

    def configure(self, factory: Any) -> None:
        (
            factory.with_state(ParcelStateV1)
            .with_deadline(DELIVERY_BUDGET, on_expired=note("v1 expired", completes=True))
            .start_with(ParcelOrdered, key=parcel_key)
            .then(schedule_collection_v1)
            .wait_for(CollectionDue, key=parcel_key)
            .then(note("v1 collected"))
            .wait_for(ParcelDelivered, key=parcel_key)
            .then(note("v1 delivered"))
            .complete()
        )


# -- version 2 ------------------------------------------------------------------------------


@dataclass
class ParcelState:
    log: list[str] = field(default_factory=list)
    grams: int = 0


def schedule_collection_v2(ctx: SagaContext[ParcelState], e: ParcelWeighed) -> None:
    ctx.state.log.append("v2 weighed")
    ctx.state.grams = e.grams
    ctx.schedule_timeout(COLLECTION_TIMER, V2_COLLECTION_DELAY, CollectionDue(e.parcel_id))


class ParcelFlow(SagaFlow):
    saga_type = SAGA_TYPE
    version = 2
    previous_versions = ["tests.testapp.parcel_flows.ParcelFlowV1"]

    def configure(self, factory: Any) -> None:
        (
            factory.with_state(ParcelState)
            .with_deadline(DELIVERY_BUDGET, on_expired=note("v2 expired", completes=True))
            .start_with(ParcelOrdered, key=parcel_key)
            .then(note("v2 ordered"))
            .wait_for(ParcelWeighed, key=parcel_key)
            .then(schedule_collection_v2)
            .wait_for(CollectionDue, key=parcel_key)
            .then(note("v2 collected"))
            .wait_for(ParcelDelivered, key=parcel_key)
            .then(note("v2 delivered"))
            .complete()
        )


FLOWS: list[type[SagaFlow]] = [ParcelFlow]
