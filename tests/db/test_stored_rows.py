"""The database checks (docs/deploying.md): ``manage.py check --database default``
and ``migrate`` report the stored rows a deploy left behind, E050-E054.

Rows come from the parcel flow's simulated deploys (tests/support/deploys.py) and, where a deploy
cannot produce them (a state JSON that no longer fits, an event type nobody declares),
from editing what the engine stored, as an older release would have left it.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterable
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.checks import CheckMessage, run_checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connection
from django.db.migrations.recorder import MigrationRecorder

from bsft_saga import clock, publish
from bsft_saga.db.stored_rows import find_problems, migrations_applied
from bsft_saga.models import SagaInstance, SagaOutboxMessage, SagaTimeout
from tests.support.deploys import running_release
from tests.testapp.ops_events import ApprovalRequested, Approved
from tests.testapp.ops_flows import make_saga, make_timer
from tests.testapp.parcel_events import ParcelOrdered, ParcelWeighed
from tests.testapp.parcel_flows import COLLECTION_TIMER, ParcelFlowV1

DATABASE_CHECK_IDS = {f"bsft_saga.E05{n}" for n in range(5)}


def database_errors(messages: Iterable[CheckMessage] | None = None) -> list[CheckMessage]:
    found = run_checks(databases=["default"]) if messages is None else messages
    return [m for m in found if m.id in DATABASE_CHECK_IDS]


def parcel(key: str) -> SagaInstance:
    return SagaInstance.objects.active().get(saga_type="tests.parcel", correlation_key=key)


def start_on_v1(*keys: str) -> None:
    with running_release(ParcelFlowV1):
        for key in keys:
            publish(ParcelOrdered(key))


def outbox_row(event_type: str, **fields: Any) -> SagaOutboxMessage:
    return SagaOutboxMessage.objects.create(
        id=uuid.uuid4(), event_type=event_type, payload={}, created_at=clock.now(), **fields
    )


# --- a database the installed code can run -------------------------------------------------


@pytest.mark.django_db
def test_instances_on_every_declared_version_with_their_timers_pass() -> None:
    start_on_v1("p-1")  # v1's collection timer and deadline timer are pending
    publish(ParcelOrdered("p-2"))
    publish(ParcelWeighed("p-2", grams=500))
    outbox_row("tests.parcel.pickup-due")  # stored under an alias: known

    assert database_errors() == []


@pytest.mark.django_db
def test_without_database_the_checks_make_no_query(
    django_assert_num_queries: Any,
) -> None:
    make_saga("gone", saga_type="tests.no-longer-installed")

    with django_assert_num_queries(0):
        messages = run_checks()
    out = StringIO()
    call_command("check", stdout=out)

    assert database_errors(messages) == []
    assert "no issues" in out.getvalue()


# --- instances ---------------------------------------------------------------------------------


def _first_in_database_order(model: Any, *pks: Any) -> Any:
    """The lowest of ``pks`` as the database orders them (MariaDB orders its UUID type its
    own way), which the checks name as their example."""
    return model.objects.filter(pk__in=pks).order_by("pk").values_list("pk", flat=True).first()


@pytest.mark.django_db
def test_instances_on_a_version_no_installed_flow_declares_are_e050() -> None:
    publish(ParcelOrdered("p-2"))
    publish(ParcelOrdered("p-3"))

    with running_release(ParcelFlowV1):  # a rollback to the release of version 1
        [error] = database_errors()

    first = _first_in_database_order(SagaInstance, parcel("p-2").pk, parcel("p-3").pk)
    assert error.id == "bsft_saga.E050"
    assert error.msg == (
        "2 active instances of 'tests.parcel' run on flow version 2, which no installed flow "
        f"declares (declared: 1); e.g. instance {first}. An event or timer for such an "
        "instance fails with UnknownFlowVersion."
    )
    assert error.hint == (
        "Install the release that declares version 2 again, or keep that definition in the "
        "current flow's previous_versions until its instances complete."
    )
    assert error.obj is SagaInstance
    assert error.is_serious()


@pytest.mark.django_db
def test_instances_of_a_saga_type_no_flow_installs_any_more_are_e050() -> None:
    gone = make_saga("gone", saga_type="tests.no-longer-installed")
    make_saga("finished", saga_type="tests.no-longer-installed", complete=True)

    [error] = database_errors()

    assert error.id == "bsft_saga.E050"
    assert error.msg.startswith(
        "1 active instance of 'tests.no-longer-installed' runs on flow version 1, which no "
        f"installed flow declares (no installed flow has this saga_type); e.g. instance {gone.pk}"
    )


@pytest.mark.django_db
def test_instances_past_the_last_step_of_their_version_are_e051() -> None:
    start_on_v1("p-1", "p-4", "p-5")
    publish(ParcelOrdered("p-2"))
    # Version 1 has 3 steps; an older release of it had a fourth, and these got that far.
    SagaInstance.objects.filter(correlation_key="p-1").update(step_index=4)
    SagaInstance.objects.filter(correlation_key="p-2").update(step_index=3)  # v2 has 4: fine

    [error] = database_errors()

    assert error.id == "bsft_saga.E051"
    assert error.msg == (
        "1 active instance of 'tests.parcel' flow version 1 is past the last step of that "
        f"version (it has 3 steps); e.g. instance {parcel('p-1').pk}. Such an instance awaits "
        "nothing and never completes."
    )
    assert "tests.testapp.parcel_flows.ParcelFlowV1 (version 1)" in str(error.hint)
    assert "previous_versions" in str(error.hint)


@pytest.mark.django_db
def test_an_active_complete_flow_instance_that_handled_its_last_step_is_e051() -> None:
    start_on_v1("p-1")
    # It was waiting for a fourth step that a release removed from version 1 in place.
    SagaInstance.objects.filter(correlation_key="p-1").update(step_index=3)

    [error] = database_errors()

    assert error.id == "bsft_saga.E051"
    assert f"e.g. instance {parcel('p-1').pk}" in error.msg


@pytest.mark.django_db
def test_a_build_flow_instance_after_its_last_step_awaits_mark_complete_and_passes() -> None:
    publish(ApprovalRequested("a-1"))
    publish(Approved("a-1"))  # not urgent: stays active until something completes it

    assert SagaInstance.objects.active().get(correlation_key="a-1").step_index == 2
    assert database_errors() == []


@pytest.mark.django_db
def test_sampled_state_that_no_longer_decodes_under_its_version_is_e054() -> None:
    start_on_v1("p-1", "p-4")
    publish(ParcelOrdered("p-2"))
    SagaInstance.objects.filter(correlation_key="p-1").update(state={"log": "not a list"})
    # Version 2 counts its weight in whole grams.
    SagaInstance.objects.filter(correlation_key="p-2").update(state={"grams": "heavy"})

    errors = database_errors()

    assert [e.id for e in errors] == ["bsft_saga.E054", "bsft_saga.E054"]
    v1, v2 = errors
    assert v1.msg == (
        "1 of 2 sampled active instances of 'tests.parcel' flow version 1 has state that no "
        "longer decodes as tests.testapp.parcel_flows.ParcelStateV1; e.g. instance "
        f"{parcel('p-1').pk}: Cannot decode ParcelStateV1: ParcelStateV1.log: expected a "
        "JSON array, got JSON string"
    )
    assert "tests.testapp.parcel_flows.ParcelState;" in v2.msg
    assert ".grams" in v2.msg
    assert "default" in str(v1.hint)


@pytest.mark.django_db
def test_the_state_check_samples_the_most_recently_updated_instances() -> None:
    start_on_v1("p-1", "p-4")
    earlier = clock.now() - timedelta(hours=1)
    SagaInstance.objects.filter(correlation_key="p-1").update(state={"log": 7}, updated_at=earlier)

    assert [p.check_id for p in find_problems("default")] == ["bsft_saga.E054"]
    assert find_problems("default", sample_size=1) == []  # p-4, the newest, decodes


# --- stored events -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_pending_and_dead_lettered_timers_of_an_unknown_event_type_are_e052() -> None:
    saga = make_saga("r-1")
    pending = make_timer(saga, "pending", event_type="tests.ops.renamed-away")
    make_timer(saga, "dead", outcome="dead_lettered", event_type="tests.ops.renamed-away")
    make_timer(saga, "fired", outcome="fired", event_type="tests.ops.renamed-away")
    make_timer(saga, "known")

    [error] = database_errors()

    assert error.id == "bsft_saga.E052"
    assert error.msg == (
        "2 pending or dead-lettered timers of event type 'tests.ops.renamed-away', which no "
        f"@event name or alias knows; e.g. timer {pending.pk}. Each fails with "
        "UnknownEventType when due or requeued."
    )
    assert "@event('new.name', aliases=('tests.ops.renamed-away',))" in str(error.hint)
    assert error.obj is SagaTimeout


@pytest.mark.django_db
def test_a_timer_the_engine_stored_whose_event_type_went_away_is_e052() -> None:
    publish(ParcelOrdered("p-2"))
    publish(ParcelWeighed("p-2", grams=500))
    SagaTimeout.objects.filter(name=COLLECTION_TIMER).update(event_type="tests.parcel.gone")

    [error] = database_errors()

    assert error.msg.startswith(
        "1 pending or dead-lettered timer of event type 'tests.parcel.gone', which no @event "
        "name or alias knows"
    )


@pytest.mark.django_db
def test_pending_or_dead_lettered_outbox_rows_of_an_unknown_event_type_are_e053() -> None:
    now = clock.now()
    dead = outbox_row("tests.ops.renamed-away", dead_lettered_at=now)
    waiting = outbox_row("tests.ops.renamed-away")
    outbox_row("tests.ops.renamed-away", delivered_at=now)
    outbox_row("tests.order.placed")

    [error] = database_errors()

    assert error.id == "bsft_saga.E053"
    assert error.msg == (
        "2 pending or dead-lettered outbox rows of event type "
        "'tests.ops.renamed-away', which no @event name or alias knows; e.g. outbox row "
        f"{_first_in_database_order(SagaOutboxMessage, dead.pk, waiting.pk)}. Each fails with "
        "UnknownEventType when "
        "delivered or requeued."
    )
    assert error.obj is SagaOutboxMessage


# --- how the checks are run --------------------------------------------------------------------


@pytest.mark.django_db
def test_manage_py_check_with_the_database_fails_listing_every_problem() -> None:
    make_saga("gone", saga_type="tests.no-longer-installed")
    make_timer(make_saga("r-1"), event_type="tests.ops.renamed-away")

    with pytest.raises(SystemCheckError) as raised:
        call_command("check", databases=["default"], stdout=StringIO(), stderr=StringIO())

    report = str(raised.value)
    assert "bsft_saga.SagaInstance: (bsft_saga.E050) 1 active instance of" in report
    assert "bsft_saga.SagaTimeout: (bsft_saga.E052) 1 pending or dead-lettered timer" in report


@pytest.mark.django_db
def test_migrate_stops_on_the_errors_unless_checks_are_skipped() -> None:
    make_saga("gone", saga_type="tests.no-longer-installed")

    with pytest.raises(SystemCheckError, match=r"bsft_saga\.E050"):
        call_command("migrate", skip_checks=False, verbosity=0, stdout=StringIO())
    call_command("migrate", skip_checks=True, verbosity=0, stdout=StringIO())


@pytest.mark.django_db
def test_nothing_is_reported_while_bsft_sagas_migrations_are_not_all_applied() -> None:
    make_saga("gone", saga_type="tests.no-longer-installed")
    MigrationRecorder(connection).record_unapplied("bsft_saga", "0001_initial")

    assert not migrations_applied("default")
    assert database_errors() == []


@pytest.mark.slow
def test_a_fresh_check_process_knows_the_deadline_event_and_reports_the_rest(
    subprocess_env: dict[str, str],
) -> None:
    publish(ParcelOrdered("p-2"))  # a pending deadline timer of bsft_saga's own event type
    check = [sys.executable, "-m", "django", "check", "--database", "default"]

    clean = subprocess.run(
        check, env=subprocess_env, capture_output=True, text=True, timeout=120, check=False
    )
    make_timer(make_saga("r-1"), event_type="tests.ops.renamed-away")
    dirty = subprocess.run(
        check, env=subprocess_env, capture_output=True, text=True, timeout=120, check=False
    )

    assert clean.returncode == 0, clean.stderr
    assert dirty.returncode == 1
    assert "(bsft_saga.E052) 1 pending or dead-lettered timer" in dirty.stderr
    assert "E050" not in dirty.stderr
