"""Events of the parcel flows, whose two versions the deploy tests run side by side."""

from __future__ import annotations

from dataclasses import dataclass

from bsft_saga import event


@event("tests.parcel.ordered")
@dataclass(frozen=True)
class ParcelOrdered:
    parcel_id: str


@event("tests.parcel.weighed")
@dataclass(frozen=True)
class ParcelWeighed:
    """Awaited only by version 2, which inserted the weighing step."""

    parcel_id: str
    grams: int


# Renamed by the release of version 2: timers that version 1 stored are under the old name.
@event("tests.parcel.collection-due", aliases=("tests.parcel.pickup-due",))
@dataclass(frozen=True)
class CollectionDue:
    parcel_id: str


@event("tests.parcel.delivered")
@dataclass(frozen=True)
class ParcelDelivered:
    parcel_id: str


@event("tests.parcel.signed")
@dataclass(frozen=True)
class ParcelSigned:
    """Awaited by the step that the release after version 2 adds at the end."""

    parcel_id: str
    signed_by: str
