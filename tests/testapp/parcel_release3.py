"""The parcel flow's next release: two everyday changes that need no new version.

``ParcelState`` gains a field with a default, and ``ParcelFlow`` a step at the end (the
recipient signs). Instances on version 2 that are still in flight carry on into the new
step; instances on version 1 are not affected. In a project these are edits of the
classes in place; the deploy tests install this module's flow with ``running_release``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bsft_saga import SagaContext, SagaFlow
from tests.testapp.parcel_events import (
    CollectionDue,
    ParcelDelivered,
    ParcelOrdered,
    ParcelSigned,
    ParcelWeighed,
)
from tests.testapp.parcel_flows import (
    DELIVERY_BUDGET,
    SAGA_TYPE,
    note,
    parcel_key,
    schedule_collection_v2,
)


@dataclass
class ParcelState:
    log: list[str] = field(default_factory=list)
    grams: int = 0
    signed_by: str = ""  # new: state stored before this release decodes with ""


def record_signature(ctx: SagaContext[ParcelState], e: ParcelSigned) -> None:
    ctx.state.signed_by = e.signed_by


class ParcelFlow(SagaFlow):
    saga_type = SAGA_TYPE
    version = 2  # unchanged: steps were only added at the end
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
            .wait_for(ParcelSigned, key=parcel_key)  # new: the last step
            .then(record_signature)
            .complete()
        )
