"""Deploying changes (docs/deploying.md).

Each test is a simulated deploy of the parcel flow. Instances started inside
``running_release(ParcelFlowV1)`` ran on the release that installed version 1 only; after
the block the test app's own release is installed: ``ParcelFlow`` (version 2, with a
weighing step inserted before the collection, and another state class) and version 1 in
its ``previous_versions``. Version 2 also renamed the collection event, keeping the old
name as an alias.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from bsft_saga import UnknownFlowVersion, publish
from bsft_saga.checks import check_flows, check_stored_rows
from bsft_saga.events import registry as event_registry_module
from bsft_saga.events.registry import EventRegistry, event_class, event_type_of, known_event_types
from bsft_saga.models import SagaInboxEntry, SagaInstance, SagaTimeout, TimeoutOutcome
from bsft_saga.testing import SagaHarness
from bsft_saga.timeouts.requests import DEADLINE_TIMER_NAME
from tests.support.deploys import running_release
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


# --- docs/deploying.md -------------------------------------------------------------------------

DOCS = Path(__file__).resolve().parents[2] / "docs" / "deploying.md"
TEST_APP = Path(__file__).resolve().parents[1] / "testapp"
CHECK_COMMAND = "$ python manage.py check --database default"


def check_database_output() -> str:
    """What ``manage.py check --database default`` prints, as a terminal shows it.

    SQLite's W001 (no SKIP LOCKED) is silenced: the page shows a PostgreSQL database.
    """
    out = StringIO()
    with override_settings(SILENCED_SYSTEM_CHECKS=["bsft_saga.W001"]):
        try:
            call_command("check", databases=["default"], stdout=out, stderr=StringIO())
        except SystemCheckError as exc:
            return str(exc)  # what the terminal shows: the error formats itself
    return out.getvalue().strip()


def without_alias(monkeypatch: pytest.MonkeyPatch, alias: str) -> None:
    """Install an event registry in which no class lists ``alias`` (a release that forgot it)."""
    registry = EventRegistry()
    for name in known_event_types() - {alias}:
        cls = event_class(name)
        if event_type_of(cls) == name:
            registry.register(cls, name, ())
    monkeypatch.setattr(event_registry_module, "event_registry", registry)


@contextmanager
def renamed_without_alias(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    start_on_v1_now("p-1")
    SagaTimeout.objects.filter(name=COLLECTION_TIMER).update(event_type=OLD_COLLECTION_EVENT)
    without_alias(monkeypatch, OLD_COLLECTION_EVENT)
    yield


@contextmanager
def field_type_changed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    publish(ParcelOrdered("p-2"))
    # An earlier release of version 2 stored the weight as text.
    SagaInstance.objects.filter(correlation_key="p-2").update(
        state={"log": ["v2 ordered"], "grams": "700 g"}
    )
    yield


@contextmanager
def step_removed_in_place(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    start_on_v1_now("p-1")
    # It waited for a fourth step, which a release removed from version 1 in place.
    SagaInstance.objects.filter(correlation_key="p-1").update(step_index=3)
    yield


@contextmanager
def rolled_back(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    publish(ParcelOrdered("p-2"))
    with running_release(ParcelFlowV1):
        yield


@contextmanager
def every_version_declared(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    start_on_v1_now("p-1")
    publish(ParcelOrdered("p-2"))
    yield


def start_on_v1_now(*keys: str) -> None:
    with running_release(ParcelFlowV1):
        for key in keys:
            publish(ParcelOrdered(key))


SCENARIOS = {
    "bsft_saga.E052": renamed_without_alias,
    "bsft_saga.E054": field_type_changed,
    "bsft_saga.E051": step_removed_in_place,
    "bsft_saga.E050": rolled_back,
    "no issues": every_version_declared,
}


def docs_blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", DOCS.read_text(), flags=re.S | re.M)


def comparable(output: str) -> str:
    """Output with what differs from run to run (ids, the silenced count) blanked out."""
    output = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<id>", output)
    output = re.sub(r"timer \d+", "timer <id>", output)
    return re.sub(r"\(\d+ silenced\)", "(<n> silenced)", output).strip()


def documented_output(marker: str) -> str:
    [block] = [b for b in docs_blocks("console") if marker in b]
    command, _, output = block.partition("\n")
    assert command == CHECK_COMMAND
    return output


@pytest.mark.django_db
@pytest.mark.parametrize("marker", SCENARIOS)
def test_docs_check_output_is_what_the_check_prints(
    marker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with SCENARIOS[marker](monkeypatch):
        printed = check_database_output()

    assert comparable(printed) == comparable(documented_output(marker))


def test_docs_show_every_check_output_the_tests_reproduce() -> None:
    blocks = docs_blocks("console")
    assert len(blocks) == len(SCENARIOS)
    assert all(block.startswith(CHECK_COMMAND + "\n") for block in blocks)


def test_docs_python_examples_are_copied_from_the_test_app() -> None:
    sources = "\n".join(path.read_text() for path in sorted(TEST_APP.glob("parcel_*.py")))
    blocks = docs_blocks("python")
    assert len(blocks) >= 5
    for block in blocks:
        assert block in sources, block
