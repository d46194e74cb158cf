"""Terminating sagas: the service, ``manage.py terminate_saga``, and the race with a step."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.test import override_settings

from bsft_saga import publish
from bsft_saga.audit import TERMINATED
from bsft_saga.engine.termination import TerminationReport, terminate
from bsft_saga.models import SagaAuditRecord, SagaInboxEntry, SagaInstance, SagaTimeout
from tests.support.services import require_server_database
from tests.testapp.timer_events import ProbePoked, ProbeStarted
from tests.testapp.timer_flows import ProbeFlow, schedule_probe_due

REASON = "customer canceled by phone, ticket 4711"


def probe(key: str) -> SagaInstance:
    return SagaInstance.objects.get(saga_type=ProbeFlow.saga_type, correlation_key=key)


def _schedule_two_timers(ctx: Any, e: ProbeStarted) -> None:
    schedule_probe_due("step-timer", timedelta(hours=1))(ctx, e)
    schedule_probe_due("saga-timer", timedelta(days=1), scope="saga")(ctx, e)


def start_probe(key: str, action: Callable[[Any], str]) -> SagaInstance:
    """A ProbeFlow instance at step 1 with two pending timers (one of them saga-scoped)."""
    publish(ProbeStarted(key, action=action(_schedule_two_timers)))
    return probe(key)


# -- the service ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_terminating_completes_the_instance_at_once_and_stores_the_reason(action: Any) -> None:
    saga = start_probe("t-1", action)

    result = terminate([saga.pk], reason=f"  {REASON}  ")

    assert result == TerminationReport(terminated=[saga.pk], refused=[])
    saga.refresh_from_db()
    assert saga.is_complete
    assert saga.completed_at is not None
    assert saga.terminated_reason == REASON
    assert saga.step_index == 1  # no step ran
    assert saga.version == 2


@pytest.mark.django_db
def test_terminating_cancels_every_pending_timer(action: Any) -> None:
    saga = start_probe("t-2", action)

    terminate([saga.pk], reason=REASON)

    timers = SagaTimeout.objects.filter(saga=saga)
    assert sorted(timers.values_list("name", "outcome")) == [
        ("saga-timer", "canceled"),
        ("step-timer", "canceled"),
    ]
    assert not timers.pending().exists()


@pytest.mark.django_db
def test_terminating_writes_one_audit_record_naming_the_saga(action: Any) -> None:
    saga = start_probe("t-3", action)

    terminate([saga.pk], reason=REASON)

    [record] = SagaAuditRecord.objects.filter(action=TERMINATED)
    assert (record.saga_type, record.correlation_key, record.instance_id) == (
        ProbeFlow.saga_type,
        "t-3",
        saga.pk,
    )
    assert record.user is None
    assert record.action == "saga.instance.terminated"


@pytest.mark.django_db
def test_a_terminated_saga_takes_no_further_events(action: Any) -> None:
    saga = start_probe("t-4", action)
    terminate([saga.pk], reason=REASON)

    publish(ProbePoked("t-4"))

    saga.refresh_from_db()
    assert saga.step_index == 1
    assert SagaInboxEntry.objects.filter(saga=saga).count() == 1


@pytest.mark.django_db
def test_a_completed_instance_is_refused_and_left_as_it_was(action: Any) -> None:
    saga = start_probe("t-5", action)
    terminate([saga.pk], reason="first")

    result = terminate([saga.pk], reason="second")

    assert result.terminated == []
    [(given, why)] = result.refused
    assert given == str(saga.pk)
    assert "already complete" in why
    assert f"{ProbeFlow.saga_type}[t-5]" in why
    saga.refresh_from_db()
    assert saga.terminated_reason == "first"
    assert SagaAuditRecord.objects.filter(action=TERMINATED).count() == 1


@pytest.mark.django_db
def test_unknown_and_malformed_ids_are_refused_and_the_others_terminated(action: Any) -> None:
    saga = start_probe("t-6", action)
    missing = uuid.uuid4()

    result = terminate(["not-a-uuid", str(missing), str(saga.pk)], reason=REASON)

    assert result.terminated == [saga.pk]
    assert result.refused == [
        ("not-a-uuid", "'not-a-uuid' is not a saga instance id (a UUID)"),
        (str(missing), f"saga instance {missing} does not exist"),
    ]


@pytest.mark.django_db
def test_a_blank_reason_is_a_value_error(action: Any) -> None:
    saga = start_probe("t-7", action)

    with pytest.raises(ValueError, match="reason"):
        terminate([saga.pk], reason="  ")

    assert not probe("t-7").is_complete


@pytest.mark.django_db
def test_without_an_audit_recorder_terminating_records_nothing(action: Any) -> None:
    saga = start_probe("t-8", action)

    with override_settings(BSFT_SAGA={"API": {"AUDIT_RECORDER": None}}):
        terminate([saga.pk], reason=REASON)

    assert probe("t-8").is_complete
    assert not SagaAuditRecord.objects.exists()


# -- the command ----------------------------------------------------------------------------


def run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("terminate_saga", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.mark.django_db
def test_the_command_terminates_every_id_it_is_given(action: Any) -> None:
    first, second = start_probe("c-1", action), start_probe("c-2", action)

    out, err = run(str(first.pk), str(second.pk), "--reason", REASON)

    assert "Terminated 2 saga instance(s)." in out
    assert err == ""
    assert probe("c-1").terminated_reason == probe("c-2").terminated_reason == REASON


@pytest.mark.django_db
def test_the_command_terminates_the_others_names_the_refused_then_fails(action: Any) -> None:
    done = start_probe("c-3", action)
    terminate([done.pk], reason="earlier")
    active = start_probe("c-4", action)
    out, err = StringIO(), StringIO()

    with pytest.raises(CommandError, match=rf"1 instance\(s\) not terminated: {done.pk}"):
        call_command(
            "terminate_saga",
            str(done.pk),
            str(active.pk),
            "--reason",
            REASON,
            stdout=out,
            stderr=err,
        )

    assert probe("c-4").is_complete
    assert f"refused {done.pk}: " in err.getvalue()
    assert "already complete" in err.getvalue()
    assert "Terminated 1 saga instance(s)." in out.getvalue()


@pytest.mark.django_db
def test_the_command_requires_a_reason(action: Any) -> None:
    saga = start_probe("c-5", action)

    with pytest.raises(CommandError, match="--reason"):
        run(str(saga.pk))
    with pytest.raises(CommandError, match="--reason must say why"):
        run(str(saga.pk), "--reason", " ")

    assert not probe("c-5").is_complete


@pytest.mark.django_db
def test_the_command_records_no_user(action: Any) -> None:
    saga = start_probe("c-6", action)

    run(str(saga.pk), "--reason", REASON)

    assert SagaAuditRecord.objects.get(action=TERMINATED).user is None


# -- racing a step, on PostgreSQL -----------------------------------------------------------


class Worker(threading.Thread):
    """Runs ``work`` on its own database connection and keeps what it raised."""

    def __init__(self, work: Callable[[], object]) -> None:
        super().__init__(daemon=True)
        self.work = work
        self.error: BaseException | None = None
        self.backend_pid: int | None = None

    def run(self) -> None:
        try:
            with connection.cursor() as cursor:
                if connection.vendor == "mysql":
                    cursor.execute("SELECT CONNECTION_ID()")
                else:
                    cursor.execute("SELECT pg_backend_pid()")
                self.backend_pid = cursor.fetchone()[0]
            self.work()
        except BaseException as exc:
            self.error = exc
        finally:
            connection.close()

    def finish(self) -> None:
        self.join(timeout=60)
        assert not self.is_alive(), "the worker hung"
        if self.error is not None:
            raise self.error


def wait_until(condition: Callable[[], bool], what: str) -> None:
    """Poll ``condition`` (a database fact, not a duration) for up to a minute."""
    for _ in range(6000):
        if condition():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting until {what}")


def waits_for_a_lock(pid: int | None) -> bool:
    """Whether the session ``pid`` waits for a row lock.

    On MariaDB and MySQL: whether it is running an UPDATE (the row it wants is locked by the
    step, so it cannot finish). InnoDB's own view of lock waits (``INNODB_TRX``) is a cache
    that did not show the waiting transaction within a minute.
    """
    with connection.cursor() as cursor:
        if connection.vendor == "mysql":
            cursor.execute(
                "SELECT STATE, INFO FROM information_schema.PROCESSLIST WHERE ID = %s", [pid]
            )
            row = cursor.fetchone()
            return row is not None and row[0] == "Updating" and row[1].startswith("UPDATE")
        cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])
        row = cursor.fetchone()
    return row is not None and row[0] == "Lock"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_step_that_read_before_the_termination_committed_drops_its_event(action: Any) -> None:
    require_server_database()
    saga = start_probe("race-1", action)
    planned, release = threading.Event(), threading.Event()

    def slow_body(ctx: Any, e: Any) -> None:
        ctx.state.actions.append("poked")
        planned.set()  # the step has read version 1 and runs its body
        assert release.wait(timeout=60)

    step = Worker(lambda: publish(ProbePoked("race-1", action=action(slow_body))))
    step.start()
    assert planned.wait(timeout=60)
    result = terminate([saga.pk], reason=REASON)
    release.set()
    step.finish()  # publish() returned normally: the loser re-planned and dropped

    assert result.terminated == [saga.pk]
    saga.refresh_from_db()
    assert (saga.is_complete, saga.terminated_reason, saga.step_index) == (True, REASON, 1)
    assert "poked" not in saga.state["actions"]
    assert SagaInboxEntry.objects.filter(saga=saga).count() == 1


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_termination_that_read_before_a_step_committed_terminates_the_newer_version(
    action: Any,
) -> None:
    require_server_database()
    saga = start_probe("race-2", action)
    stepped, commit = threading.Event(), threading.Event()

    def step_and_hold() -> None:
        with transaction.atomic():  # the step's window holds the row lock until this commits
            publish(ProbePoked("race-2", action=action(lambda ctx, e: None)))
            stepped.set()
            assert commit.wait(timeout=60)

    step = Worker(step_and_hold)
    termination = Worker(lambda: outcome.append(terminate([saga.pk], reason=REASON)))
    outcome: list[TerminationReport] = []
    step.start()
    assert stepped.wait(timeout=60)
    termination.start()
    wait_until(lambda: waits_for_a_lock(termination.backend_pid), "the termination waits")
    commit.set()
    step.finish()
    termination.finish()

    assert outcome == [TerminationReport(terminated=[saga.pk], refused=[])]
    saga.refresh_from_db()
    assert saga.step_index == 2  # the step's write is kept...
    assert (saga.is_complete, saga.terminated_reason) == (True, REASON)  # ...and so is this
    assert saga.version == 3
    assert SagaInboxEntry.objects.filter(saga=saga).count() == 2
