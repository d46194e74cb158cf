"""``erase_saga_data()``: one key of one saga type forgotten, each instance audited.

The command is tested in tests/retention/test_retention_commands.py.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import override_settings

from bsft_saga import publish
from bsft_saga.models import (
    SagaAuditRecord,
    SagaInboxEntry,
    SagaInstance,
    SagaJournalEntry,
    SagaKeptEvent,
    SagaOutboxMessage,
    SagaTimeout,
    TimeoutOutcome,
)
from bsft_saga.retention import ERASED, DeletedRows, erase_saga_data
from bsft_saga.timeouts import drain_due
from tests.support.retention_rows import outbox_row, saga
from tests.testapp.ops_events import ReminderRequested
from tests.testapp.ops_flows import NUDGE_SAGA_TYPE, REMINDER_SAGA_TYPE, make_timer

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 6, 1, 3, 0, tzinfo=UTC)
EARLIER = NOW - timedelta(days=3)


@pytest.fixture
def customer() -> dict[str, Any]:
    """Two finished instances and an active one of the key ``c-1``, each with rows of
    every kind; and the rows of other keys and another saga type, which stay."""
    first = saga("c-1", started_at=EARLIER, completed_at=EARLIER, events=2)
    later = EARLIER + timedelta(hours=1)
    second = saga("c-1", started_at=later, completed_at=later)
    active = saga("c-1", started_at=NOW - timedelta(hours=1), events=3)
    for instance in (first, second):
        make_timer(instance, "remind", outcome=TimeoutOutcome.FIRED, dispatched_at=EARLIER)
        outbox_row(instance, created_at=EARLIER, delivered_at=EARLIER)
    outbox_row(second, created_at=EARLIER)  # pending: erased all the same
    make_timer(active, "remind", due_at=NOW + timedelta(days=1))
    outbox_row(active, created_at=NOW)
    others = [
        saga("c-2", started_at=EARLIER, completed_at=EARLIER),
        saga("c-1", started_at=EARLIER, completed_at=EARLIER, saga_type=NUDGE_SAGA_TYPE),
    ]
    return {"finished": [first, second], "active": active, "others": others}


def rows_of(instance: SagaInstance) -> DeletedRows:
    def count(model: Any) -> int:
        return int(model.objects.filter(saga_id=instance.pk).count())

    return DeletedRows(
        instances=int(SagaInstance.objects.filter(pk=instance.pk).exists()),
        inbox=count(SagaInboxEntry),
        journal=count(SagaJournalEntry),
        kept=count(SagaKeptEvent),
        timeouts=count(SagaTimeout),
        outbox=count(SagaOutboxMessage),
    )


def erased_records() -> list[tuple[Any, ...]]:
    return list(
        SagaAuditRecord.objects.filter(action=ERASED)
        .order_by("recorded_at", "id")
        .values_list("saga_type", "correlation_key", "instance_id", "user_id", "username")
    )


def test_every_finished_instance_of_the_key_goes_with_all_its_rows(
    customer: dict[str, Any],
) -> None:
    first, second = customer["finished"]

    report = erase_saga_data(REMINDER_SAGA_TYPE, "c-1", now=NOW)

    assert report.erased == (first.pk, second.pk)
    assert report.instances == 2
    assert report.rows == DeletedRows(instances=2, inbox=3, journal=3, timeouts=2, outbox=3)
    assert rows_of(first) == rows_of(second) == DeletedRows()
    assert all(rows_of(other).instances == 1 for other in customer["others"])


def test_each_erased_instance_gets_one_audit_record_without_a_user(
    customer: dict[str, Any],
) -> None:
    first, second = customer["finished"]

    erase_saga_data(REMINDER_SAGA_TYPE, "c-1", now=NOW)

    assert erased_records() == [
        (REMINDER_SAGA_TYPE, "c-1", first.pk, None, ""),
        (REMINDER_SAGA_TYPE, "c-1", second.pk, None, ""),
    ]


def test_the_active_instance_is_kept_without_include_active(customer: dict[str, Any]) -> None:
    active = customer["active"]

    report = erase_saga_data(REMINDER_SAGA_TYPE, "c-1", now=NOW)

    assert report.kept_active == (active.pk,)
    assert rows_of(active) == DeletedRows(instances=1, inbox=3, journal=3, timeouts=1, outbox=1)
    assert SagaTimeout.objects.get(saga=active).dispatched_at is None


def test_include_active_erases_the_active_instance_too(customer: dict[str, Any]) -> None:
    active = customer["active"]

    report = erase_saga_data(REMINDER_SAGA_TYPE, "c-1", include_active=True, now=NOW)

    assert report.instances == 3
    assert report.kept_active == ()
    assert active.pk in report.erased
    assert rows_of(active) == DeletedRows()
    assert len(erased_records()) == 3


def test_an_erased_active_saga_never_fires_its_timer_and_its_key_can_start_again() -> None:
    publish(ReminderRequested("c-9", delay_seconds=0))  # its timer is due at once

    erase_saga_data(REMINDER_SAGA_TYPE, "c-9", include_active=True)

    assert drain_due().fired == 0
    assert not SagaInstance.objects.for_key(REMINDER_SAGA_TYPE, "c-9").exists()
    publish(ReminderRequested("c-9", delay_seconds=0))
    [fresh] = SagaInstance.objects.for_key(REMINDER_SAGA_TYPE, "c-9")
    assert not fresh.is_complete


def test_a_dry_run_counts_and_neither_deletes_nor_records(customer: dict[str, Any]) -> None:
    instances = SagaInstance.objects.count()

    report = erase_saga_data(REMINDER_SAGA_TYPE, "c-1", include_active=True, dry_run=True)

    assert report.instances == 3
    assert SagaInstance.objects.count() == instances
    assert erased_records() == []


def test_an_unknown_key_erases_nothing(customer: dict[str, Any]) -> None:
    report = erase_saga_data(REMINDER_SAGA_TYPE, "nobody", include_active=True)

    assert (report.instances, report.kept_active) == (0, ())
    assert erased_records() == []


def test_without_an_audit_recorder_the_instances_are_erased_unrecorded(
    customer: dict[str, Any],
) -> None:
    with override_settings(BSFT_SAGA={"API": {"AUDIT_RECORDER": None}}):
        report = erase_saga_data(REMINDER_SAGA_TYPE, "c-1")

    assert report.instances == 2
    assert not SagaAuditRecord.objects.exists()


class FailingRecorder:
    def record(self, **kwargs: Any) -> None:
        raise RuntimeError("audit store unavailable")


def test_an_instance_whose_audit_record_fails_is_not_erased(customer: dict[str, Any]) -> None:
    first, _ = customer["finished"]
    recorder = f"{__name__}.FailingRecorder"

    with (
        override_settings(BSFT_SAGA={"API": {"AUDIT_RECORDER": recorder}}),
        pytest.raises(RuntimeError, match="audit store unavailable"),
    ):
        erase_saga_data(REMINDER_SAGA_TYPE, "c-1")

    assert rows_of(first).instances == 1


def test_a_single_instance_flow_is_erased_by_the_empty_key() -> None:
    single = saga("", started_at=EARLIER, completed_at=EARLIER)

    assert erase_saga_data(REMINDER_SAGA_TYPE, "").erased == (single.pk,)
