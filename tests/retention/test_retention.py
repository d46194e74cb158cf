"""``purge_saga_data()`` and ``erase_saga_data()``: what goes, what stays, in bounded batches.

Every test builds rows at times relative to ``NOW`` and purges with ``now=NOW``, except where
the clock itself is the subject. The commands, the task and the check are
tests/retention/test_retention_commands.py; a purge beside live traffic is
tests/retention/test_retention_concurrency.py.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from freezegun import freeze_time

from bsft_saga import publish
from bsft_saga.models import (
    SagaAuditRecord,
    SagaInboxEntry,
    SagaInstance,
    SagaOutboxMessage,
    SagaTimeout,
    TimeoutOutcome,
)
from bsft_saga.retention import (
    PurgeReport,
    WindowError,
    purge_saga_data,
)
from bsft_saga.timeouts import drain_due
from tests.support.retention_rows import audit_record, bulk_finished_sagas, outbox_row, saga
from tests.testapp.ops_events import ReminderRequested
from tests.testapp.ops_flows import REMINDER_SAGA_TYPE, make_timer

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 6, 1, 3, 0, tzinfo=UTC)
OLD = NOW - timedelta(days=40)  # beyond the default 30-day window
RECENT = NOW - timedelta(days=10)  # within it
WINDOW = timedelta(days=30)


def purge(**kwargs: Any) -> PurgeReport:
    return purge_saga_data(**{"older_than": WINDOW, "now": NOW, **kwargs})


def exists(row: Any) -> bool:
    return type(row).objects.filter(pk=row.pk).exists()


def inbox_of(instance: SagaInstance) -> int:
    return SagaInboxEntry.objects.filter(saga_id=instance.pk).count()


# -- finished instances ----------------------------------------------------------------------


def test_a_finished_instance_older_than_the_window_goes_with_all_its_rows() -> None:
    done = saga("done", started_at=OLD, completed_at=OLD, events=3)
    fired = make_timer(done, "remind", outcome=TimeoutOutcome.FIRED, dispatched_at=OLD)
    # Retired within the window, but it belongs to the finished instance.
    canceled = make_timer(done, "late", outcome=TimeoutOutcome.CANCELED, dispatched_at=RECENT)
    delivered = outbox_row(done, created_at=OLD, delivered_at=RECENT)

    report = purge()

    assert report == PurgeReport(instances=1, inbox=3, journal=3, timeouts=2, outbox=1, audit=0)
    assert not any(exists(row) for row in (done, fired, canceled, delivered))
    assert not SagaInboxEntry.objects.exists()


def test_a_finished_instance_within_the_window_stays_whole() -> None:
    done = saga("done", started_at=OLD, completed_at=RECENT, events=2)
    delivered = outbox_row(done, created_at=RECENT, delivered_at=RECENT)

    assert purge() == PurgeReport()
    assert exists(done)
    assert exists(delivered)
    assert inbox_of(done) == 2


def test_an_active_instance_and_its_inbox_rows_are_never_deleted() -> None:
    running = saga("running", started_at=OLD - timedelta(days=300), events=5)
    pending = make_timer(running, "remind", due_at=OLD)
    fired = make_timer(running, "old", outcome=TimeoutOutcome.FIRED, dispatched_at=OLD)

    report = purge(older_than=timedelta(0), now=NOW + timedelta(days=3650))

    assert report == PurgeReport(timeouts=1)
    assert exists(running)
    assert inbox_of(running) == 5
    assert exists(pending)
    assert not exists(fired)


def test_a_finished_instance_with_a_pending_outbox_row_waits_for_its_delivery() -> None:
    done = saga("done", started_at=OLD, completed_at=OLD)
    pending = outbox_row(done, created_at=OLD)

    assert purge() == PurgeReport()
    assert exists(done)
    assert exists(pending)
    assert inbox_of(done) == 1

    SagaOutboxMessage.objects.filter(pk=pending.pk).update(delivered_at=OLD)
    assert purge() == PurgeReport(instances=1, inbox=1, journal=1, outbox=1)


def test_a_finished_instance_with_a_pending_timer_is_kept_with_the_timer() -> None:
    # The engine cancels a saga's timers when it completes; a row written around it (by
    # hand, or by a bug) still never loses its pending timer.
    done = saga("done", started_at=OLD, completed_at=OLD)
    pending = make_timer(done, "remind", due_at=OLD)

    assert purge() == PurgeReport()
    assert exists(done)
    assert exists(pending)


# -- retired timers and settled outbox rows of any instance -----------------------------------


def test_retired_timers_of_any_instance_go_by_dispatched_at_whatever_their_outcome() -> None:
    running = saga("running", started_at=OLD)
    old = {
        outcome: make_timer(running, f"old-{outcome}", outcome=outcome, dispatched_at=OLD)
        for outcome in TimeoutOutcome.values
    }
    recent = make_timer(running, "recent", outcome=TimeoutOutcome.FIRED, dispatched_at=RECENT)

    report = purge(keep_dead_lettered=False)

    assert report == PurgeReport(timeouts=len(old))
    assert not any(exists(row) for row in old.values())
    assert exists(recent)


def test_settled_outbox_rows_go_whatever_instance_they_belong_to_or_none() -> None:
    running = saga("running", started_at=OLD)
    done_recently = saga("done", started_at=OLD, completed_at=RECENT)
    gone = [
        outbox_row(running, created_at=OLD, delivered_at=OLD),
        outbox_row(done_recently, created_at=OLD, delivered_at=OLD),
        outbox_row(None, created_at=OLD, delivered_at=OLD),
        outbox_row(None, created_at=OLD, dead_lettered_at=OLD),
    ]
    kept = [
        outbox_row(None, created_at=OLD),  # pending, however old
        outbox_row(None, created_at=RECENT, delivered_at=RECENT),
        outbox_row(None, created_at=OLD, dead_lettered_at=RECENT),
    ]

    report = purge(keep_dead_lettered=False)

    assert report == PurgeReport(outbox=len(gone))
    assert not any(exists(row) for row in gone)
    assert all(exists(row) for row in kept)


# -- dead letters ----------------------------------------------------------------------------


@pytest.fixture
def dead_letters() -> dict[str, Any]:
    """A finished instance with a dead-lettered timer, one with a dead-lettered outbox row,
    and a dead-lettered outbox row of nobody; everything retired 40 days ago."""
    timer_saga = saga("dead-timer", started_at=OLD, completed_at=OLD, events=2)
    outbox_saga = saga("dead-outbox", started_at=OLD, completed_at=OLD, events=2)
    return {
        "timer_saga": timer_saga,
        "timer": make_timer(
            timer_saga, "remind", outcome=TimeoutOutcome.DEAD_LETTERED, dispatched_at=OLD
        ),
        "outbox_saga": outbox_saga,
        "outbox": outbox_row(outbox_saga, created_at=OLD, dead_lettered_at=OLD),
        "orphan": outbox_row(None, created_at=OLD, dead_lettered_at=OLD),
    }


def test_keeping_dead_letters_keeps_them_their_finished_instances_and_inbox_rows(
    dead_letters: dict[str, Any],
) -> None:
    report = purge(keep_dead_lettered=True)

    assert report == PurgeReport()
    assert all(exists(row) for row in dead_letters.values())
    assert inbox_of(dead_letters["timer_saga"]) == 2
    assert inbox_of(dead_letters["outbox_saga"]) == 2


def test_without_keeping_dead_letters_old_ones_go_with_their_instances(
    dead_letters: dict[str, Any],
) -> None:
    report = purge(keep_dead_lettered=False)

    assert report == PurgeReport(instances=2, inbox=4, journal=4, timeouts=1, outbox=2)
    assert not any(exists(row) for row in dead_letters.values())


def test_keeping_dead_letters_is_the_default(dead_letters: dict[str, Any]) -> None:
    assert purge() == PurgeReport()


# -- audit records ---------------------------------------------------------------------------


def test_audit_records_are_kept_without_an_audit_window() -> None:
    ancient = audit_record(NOW - timedelta(days=3650))

    assert purge(audit_older_than=None).audit == 0
    assert purge().audit == 0  # RETENTION["AUDIT_OLDER_THAN"] defaults to None
    assert exists(ancient)


def test_audit_records_older_than_the_audit_window_go() -> None:
    old = audit_record(NOW - timedelta(days=400))
    young = audit_record(NOW - timedelta(days=300))

    assert purge(audit_older_than=timedelta(days=365)).audit == 1
    assert not exists(old)
    assert exists(young)


# -- windows and defaults --------------------------------------------------------------------


def test_omitted_arguments_take_the_retention_setting(dead_letters: dict[str, Any]) -> None:
    audit_record(NOW - timedelta(days=8))
    retention = {"OLDER_THAN": timedelta(days=50), "KEEP_DEAD_LETTERED": False}
    with override_settings(BSFT_SAGA={"RETENTION": retention}):
        assert purge_saga_data(now=NOW) == PurgeReport()  # 40 days is within 50
    retention = {"OLDER_THAN": 7 * 86400, "KEEP_DEAD_LETTERED": False, "AUDIT_OLDER_THAN": 604800}
    with override_settings(BSFT_SAGA={"RETENTION": retention}):
        report = purge_saga_data(now=NOW)
    assert report == PurgeReport(instances=2, inbox=4, journal=4, timeouts=1, outbox=2, audit=1)


def test_the_window_is_measured_from_the_clock() -> None:
    done = saga("done", started_at=NOW, completed_at=NOW)
    with freeze_time(NOW + timedelta(days=29)):
        assert purge_saga_data(older_than=WINDOW).instances == 0
    with freeze_time(NOW + timedelta(days=31)):
        assert purge_saga_data(older_than=WINDOW).instances == 1
    assert not exists(done)


def test_a_window_that_cannot_be_measured_is_an_error_naming_it() -> None:
    with pytest.raises(WindowError, match="older_than must not be negative"):
        purge(older_than=timedelta(days=-1))
    with pytest.raises(WindowError, match="audit_older_than reaches back before the year 1"):
        purge(audit_older_than=timedelta(days=999_999_999))
    with pytest.raises(ValueError, match="batch_size must be a positive integer, got 0"):
        purge(batch_size=0)


def test_a_dry_run_counts_exactly_what_the_purge_then_deletes(
    dead_letters: dict[str, Any],
) -> None:
    done = saga("done", started_at=OLD, completed_at=OLD, events=2)
    make_timer(done, "remind", outcome=TimeoutOutcome.FIRED, dispatched_at=OLD)
    outbox_row(done, created_at=OLD, delivered_at=OLD)
    running = saga("running", started_at=OLD)
    make_timer(running, "old", outcome=TimeoutOutcome.MISSED, dispatched_at=OLD)
    outbox_row(None, created_at=OLD, delivered_at=OLD)
    audit_record(OLD)
    options = {"keep_dead_lettered": False, "audit_older_than": WINDOW}
    rows_before = _row_counts()

    would = purge(dry_run=True, **options)

    assert _row_counts() == rows_before
    assert would == PurgeReport(instances=3, inbox=6, journal=6, timeouts=3, outbox=4, audit=1)
    assert purge(**options) == would


def _row_counts() -> tuple[int, ...]:
    models = (SagaInstance, SagaInboxEntry, SagaTimeout, SagaOutboxMessage, SagaAuditRecord)
    return tuple(model.objects.count() for model in models)


# -- de-duplication of start events ----------------------------------------------------------


def test_a_start_event_redelivered_after_its_instance_was_purged_starts_a_new_instance() -> None:
    message_id = uuid.uuid4()
    with freeze_time(NOW) as frozen:
        publish(ReminderRequested("dedup"), message_id=message_id)
        drain_due()  # the reminder fires and completes the saga
        [first] = SagaInstance.objects.for_key(REMINDER_SAGA_TYPE, "dedup")
        assert first.is_complete

        publish(ReminderRequested("dedup"), message_id=message_id)  # within the window
        assert SagaInstance.objects.for_key(REMINDER_SAGA_TYPE, "dedup").count() == 1

        frozen.move_to(NOW + WINDOW + timedelta(seconds=1))
        assert purge_saga_data(older_than=WINDOW).instances == 1
        publish(ReminderRequested("dedup"), message_id=message_id)

    [second] = SagaInstance.objects.for_key(REMINDER_SAGA_TYPE, "dedup")
    assert second.pk != first.pk
    assert not second.is_complete


# -- bounded batches -------------------------------------------------------------------------

BULK = 2_500
BATCH = 400


def test_a_bulk_purge_deletes_thousands_of_instances_in_bounded_statements() -> None:
    bulk_finished_sagas(BULK, completed_at=OLD, inbox_per_saga=2)
    running = saga("running", started_at=OLD, events=3)
    pending = make_timer(running, "remind", due_at=OLD)

    with CaptureQueriesContext(connection) as queries:
        report = purge(batch_size=BATCH)

    assert report == PurgeReport(
        instances=BULK, inbox=2 * BULK, journal=2 * BULK, timeouts=BULK, outbox=BULK
    )
    assert SagaInstance.objects.get() == running
    assert inbox_of(running) == 3
    assert SagaTimeout.objects.get() == pending
    assert not SagaOutboxMessage.objects.exists()

    statements = [q["sql"] for q in queries]
    # A table's rows go in DELETEs of BATCH rows until one deletes fewer (maybe none).
    # The retired timers and delivered outbox rows go first, whoever they belong to; then
    # each page of at most BATCH instances costs one SELECT of their ids, its inbox rows,
    # the DELETEs that find no timer, no outbox row and no kept event left, its journal
    # entries, and one for the instances.
    pages = [BATCH] * (BULK // BATCH) + [BULK % BATCH]
    expected = deletes(BULK) + deletes(BULK)
    expected += sum(
        1 + deletes(2 * page) + deletes(0) + deletes(0) + deletes(0) + deletes(2 * page) + 1
        for page in pages
    )
    expected += deletes(0)  # the heartbeats of dispatchers long gone: none
    assert len(statements) == expected
    instance_deletes = [sql for sql in statements if sql.startswith(_instance_delete())]
    assert len(instance_deletes) == len(pages)
    unbounded = [
        sql for sql in statements if f"LIMIT {BATCH}" not in sql and sql not in instance_deletes
    ]
    if not _sliced_subqueries():
        # MariaDB and MySQL: each batch's DELETE names the ids its SELECT ... LIMIT read.
        unbounded = [sql for sql in unbounded if not sql.startswith("DELETE")]
    assert not unbounded, "an unbounded statement"
    state = f".{connection.ops.quote_name('state')}"
    assert not any(state in sql for sql in statements), "instance rows were loaded"


def _instance_delete() -> str:
    return f"DELETE FROM {connection.ops.quote_name(SagaInstance._meta.db_table)}"


def deletes(rows: int) -> int:
    """The statements that DELETE ``rows`` rows, BATCH at a time: one per batch until one
    deletes fewer. On MariaDB and MySQL (no LIMIT in an IN subquery) each batch is the
    SELECT of its ids, then their DELETE unless it found none."""
    if _sliced_subqueries():
        return rows // BATCH + 1
    return 2 * (rows // BATCH) + (2 if rows % BATCH else 1)


def _sliced_subqueries() -> bool:
    return bool(connection.features.allow_sliced_subqueries_with_in)
