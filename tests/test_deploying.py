"""Deploying changes (API.md, "Deploying changes"; docs/deploying.md).

Each test is a simulated deploy of the parcel flow. Instances started inside
``running_release(ParcelFlowV1)`` ran on the release that installed version 1 only; after
the block the test app's own release is installed: ``ParcelFlow`` (version 2, with a
weighing step inserted before the collection, and another state class) and version 1 in
its ``previous_versions``. Version 2 also renamed the collection event, keeping the old
name as an alias.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from bsft_saga import UnknownFlowVersion
from bsft_saga.checks import check_flows, check_stored_rows
from bsft_saga.models import SagaInboxEntry, SagaInstance, SagaTimeout, TimeoutOutcome
from bsft_saga.testing import SagaHarness
from bsft_saga.timeouts.requests import DEADLINE_TIMER_NAME
from tests.deploys import running_release
from tests.testapp import parcel_release3
from tests.testapp.parcel_events import ParcelDelivered, ParcelOrdered, ParcelSigned, ParcelWeighed
from tests.testapp.parcel_flows import (
    COLLECTION_TIMER,
    DELIVERY_BUDGET,
    SAGA_TYPE,
    V1_COLLECTION_DELAY,
    V2_COLLECTION_DELAY,
    ParcelFlow,
    ParcelFlowV1,
    ParcelState,
    ParcelStateV1,
)

START = datetime(2026, 5, 4, 8, 0, tzinfo=UTC)
OLD_COLLECTION_EVENT = "tests.parcel.pickup-due"
COLLECTION_EVENT = "tests.parcel.collection-due"


@pytest.fixture
def harness(transactional_db: None) -> Iterator[SagaHarness]:
    with SagaHarness(start=START) as harness:
        yield harness


def saga(harness: SagaHarness, key: str) -> SagaInstance:
    found = harness.get_saga(SAGA_TYPE, key)
    assert found is not None
    return found


def start_on_v1(harness: SagaHarness, *keys: str) -> None:
    with running_release(ParcelFlowV1):
        for key in keys:
            harness.publish(ParcelOrdered(key))


# --- instances in flight keep their version ------------------------------------------------


def test_an_instance_started_on_v1_finishes_on_the_v1_steps_after_v2_is_deployed(
    harness: SagaHarness,
) -> None:
    start_on_v1(harness, "p-1")

    harness.advance_time(V1_COLLECTION_DELAY)  # the collection timer version 1 scheduled
    harness.publish(ParcelDelivered("p-1"))

    finished = saga(harness, "p-1")
    assert (finished.flow_version, finished.step_index, finished.is_complete) == (1, 3, True)
    assert harness.state(ParcelFlow, "p-1") == ParcelStateV1(
        log=["v1 ordered", "v1 collected", "v1 delivered"]
    )


def test_a_new_instance_starts_on_the_current_version(harness: SagaHarness) -> None:
    harness.publish(ParcelOrdered("p-2"))
    harness.publish(ParcelWeighed("p-2", grams=900))
    harness.advance_time(V2_COLLECTION_DELAY)
    harness.publish(ParcelDelivered("p-2"))

    finished = saga(harness, "p-2")
    assert (finished.flow_version, finished.step_index, finished.is_complete) == (2, 4, True)
    assert harness.state(ParcelFlow, "p-2") == ParcelState(
        log=["v2 ordered", "v2 weighed", "v2 collected", "v2 delivered"], grams=900
    )


def test_each_instance_names_and_decodes_with_the_state_class_of_its_version(
    harness: SagaHarness,
) -> None:
    start_on_v1(harness, "p-1")
    harness.publish(ParcelOrdered("p-2"))

    assert saga(harness, "p-1").state_type == "tests.testapp.parcel_flows.ParcelStateV1"
    assert saga(harness, "p-2").state_type == "tests.testapp.parcel_flows.ParcelState"
    assert type(harness.state(ParcelFlow, "p-1")) is ParcelStateV1
    assert type(harness.state(ParcelFlow, "p-2")) is ParcelState


def test_instances_on_both_versions_advance_side_by_side(harness: SagaHarness) -> None:
    start_on_v1(harness, "p-1")
    harness.publish(ParcelOrdered("p-2"))

    # Both are at step 1, which each version defines differently: only v2 weighs.
    harness.publish(ParcelWeighed("p-1", grams=100))
    harness.publish(ParcelWeighed("p-2", grams=700))
    assert (saga(harness, "p-1").step_index, saga(harness, "p-2").step_index) == (1, 2)

    harness.advance_time(max(V1_COLLECTION_DELAY, V2_COLLECTION_DELAY))
    harness.publish(ParcelDelivered("p-1"))
    harness.publish(ParcelDelivered("p-2"))

    assert harness.state(ParcelFlow, "p-1").log == ["v1 ordered", "v1 collected", "v1 delivered"]
    assert harness.state(ParcelFlow, "p-2").log == [
        "v2 ordered",
        "v2 weighed",
        "v2 collected",
        "v2 delivered",
    ]
    assert saga(harness, "p-1").is_complete
    assert saga(harness, "p-2").is_complete


def test_a_key_whose_v1_instance_completed_starts_again_on_v2(harness: SagaHarness) -> None:
    start_on_v1(harness, "p-1")
    harness.advance_time(V1_COLLECTION_DELAY)
    harness.publish(ParcelDelivered("p-1"))

    harness.publish(ParcelOrdered("p-1"))

    assert SagaInstance.objects.filter(correlation_key="p-1").count() == 2
    assert saga(harness, "p-1").flow_version == 2
    assert harness.state(ParcelFlow, "p-1") == ParcelState(log=["v2 ordered"])


def test_the_deadline_of_each_instance_runs_the_on_expired_of_its_version(
    harness: SagaHarness,
) -> None:
    start_on_v1(harness, "p-1")
    harness.publish(ParcelOrdered("p-2"))

    harness.advance_time(DELIVERY_BUDGET)

    assert harness.state(ParcelFlow, "p-1").log == ["v1 ordered", "v1 collected", "v1 expired"]
    assert harness.state(ParcelFlow, "p-2").log == ["v2 ordered", "v2 expired"]
    assert saga(harness, "p-1").is_complete
    assert saga(harness, "p-2").is_complete


# --- a renamed event ---------------------------------------------------------------------------


def test_a_timer_stored_under_the_old_event_name_fires_into_its_saga_under_the_new_one(
    harness: SagaHarness,
) -> None:
    start_on_v1(harness, "p-1")
    # The release of version 1 stored its timers under the event's name of the time.
    SagaTimeout.objects.filter(name=COLLECTION_TIMER).update(event_type=OLD_COLLECTION_EVENT)

    harness.advance_time(V1_COLLECTION_DELAY)

    timer = SagaTimeout.objects.get(name=COLLECTION_TIMER)
    assert timer.outcome == TimeoutOutcome.FIRED
    assert saga(harness, "p-1").step_index == 2
    handled = SagaInboxEntry.objects.filter(
        saga__correlation_key="p-1", message_id=timer.message_id
    )
    assert list(handled.values_list("event_type", flat=True)) == [COLLECTION_EVENT]


def test_a_timer_scheduled_now_stores_the_new_event_name(harness: SagaHarness) -> None:
    harness.publish(ParcelOrdered("p-2"))
    harness.publish(ParcelWeighed("p-2", grams=700))

    timer = SagaTimeout.objects.get(name=COLLECTION_TIMER)
    assert timer.event_type == COLLECTION_EVENT


# --- everyday changes: a step added at the end, a state field with a default -------------------


def at_delivery_on_v2(harness: SagaHarness, key: str) -> None:
    harness.publish(ParcelOrdered(key))
    harness.publish(ParcelWeighed(key, grams=700))
    harness.advance_time(V2_COLLECTION_DELAY)


def test_an_instance_in_flight_goes_on_to_a_step_added_at_the_end(harness: SagaHarness) -> None:
    at_delivery_on_v2(harness, "p-2")

    with running_release(parcel_release3.ParcelFlow):
        harness.publish(ParcelDelivered("p-2"))
        waiting = saga(harness, "p-2")
        harness.publish(ParcelSigned("p-2", signed_by="R. Recipient"))
        state = harness.state(SAGA_TYPE, "p-2")

    assert (waiting.step_index, waiting.is_complete) == (4, False)
    assert saga(harness, "p-2").is_complete
    assert state == parcel_release3.ParcelState(
        log=["v2 ordered", "v2 weighed", "v2 collected", "v2 delivered"],
        grams=700,
        signed_by="R. Recipient",
    )


def test_state_stored_before_a_field_was_added_decodes_with_its_default(
    harness: SagaHarness,
) -> None:
    at_delivery_on_v2(harness, "p-2")

    with running_release(parcel_release3.ParcelFlow):
        state = harness.state(SAGA_TYPE, "p-2")

    assert state == parcel_release3.ParcelState(
        log=["v2 ordered", "v2 weighed", "v2 collected"], grams=700, signed_by=""
    )


def test_a_release_with_only_everyday_changes_passes_the_database_checks(
    harness: SagaHarness,
) -> None:
    start_on_v1(harness, "p-1")
    at_delivery_on_v2(harness, "p-2")

    with running_release(parcel_release3.ParcelFlow):
        assert check_flows() == []
        assert check_stored_rows(databases=["default"]) == []


# --- a version no installed flow declares (a rolled-back deploy) -------------------------------


def test_after_a_rollback_an_event_for_a_v2_instance_raises_and_changes_nothing(
    harness: SagaHarness,
) -> None:
    harness.publish(ParcelOrdered("p-2"))

    with running_release(ParcelFlowV1), pytest.raises(UnknownFlowVersion) as raised:
        harness.publish(ParcelDelivered("p-2"))

    assert (raised.value.saga_type, raised.value.flow_version) == ("tests.parcel", 2)
    assert "Unknown flow version 2 of 'tests.parcel'" in str(raised.value)
    assert "declares version(s) 1" in str(raised.value)
    unchanged = saga(harness, "p-2")
    assert (unchanged.step_index, unchanged.is_complete) == (1, False)
    assert harness.state(ParcelFlow, "p-2") == ParcelState(log=["v2 ordered"])


def test_after_a_rollback_a_timer_of_a_v2_instance_fails_its_attempts_without_applying(
    harness: SagaHarness,
) -> None:
    harness.publish(ParcelOrdered("p-2"))
    harness.publish(ParcelWeighed("p-2", grams=700))

    with running_release(ParcelFlowV1):
        harness.advance_time(V2_COLLECTION_DELAY)

    timer = SagaTimeout.objects.get(name=COLLECTION_TIMER)
    assert timer.outcome != TimeoutOutcome.FIRED
    assert timer.attempts >= 1
    assert "UnknownFlowVersion: Unknown flow version 2 of 'tests.parcel'" in timer.last_error
    assert saga(harness, "p-2").step_index == 2


def test_after_a_rollback_the_deadline_of_a_v2_instance_is_retried_not_dropped(
    harness: SagaHarness,
) -> None:
    harness.publish(ParcelOrdered("p-2"))

    with running_release(ParcelFlowV1):
        harness.advance_time(DELIVERY_BUDGET)

    deadline = SagaTimeout.objects.get(name=DEADLINE_TIMER_NAME)
    assert deadline.outcome != TimeoutOutcome.FIRED
    assert "UnknownFlowVersion" in deadline.last_error
    assert not saga(harness, "p-2").is_complete
