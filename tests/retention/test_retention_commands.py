"""The faces of retention: ``purge_saga_data`` and ``erase_saga_data`` commands, the Celery
task ``bsft_saga.tasks.purge_saga_data`` and the system check W040.

What a purge deletes is tests/retention/test_retention.py; these tests pin the options, their
defaults and the output.
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from celery import current_app
from celery.schedules import crontab
from django.core.checks import run_checks
from django.core.management import CommandError
from django.test import override_settings

from bsft_saga import clock
from bsft_saga.models import SagaAuditRecord, SagaInstance, SagaTimeout, TimeoutOutcome
from bsft_saga.tasks import purge_saga_data as purge_task
from tests.management.test_commands import last_line, run
from tests.support.retention_rows import audit_record, outbox_row, saga
from tests.testapp.ops_flows import REMINDER_SAGA_TYPE, make_timer

pytestmark = pytest.mark.django_db

TOTALS = "instances={} inbox={} journal={} timeouts={} outbox={} audit={} dispatchers=0"
RETENTION_PAGE = Path(__file__).resolve().parents[2] / "docs" / "operations" / "retention.md"


@pytest.fixture
def history() -> dict[str, Any]:
    """Rows 40 days old: a finished instance (2 inbox rows, a fired timer, a delivered
    outbox row), one with a dead-lettered timer, an audit record of 400 days."""
    old = clock.now() - timedelta(days=40)
    done = saga("done", started_at=old, completed_at=old, events=2)
    make_timer(done, "remind", outcome=TimeoutOutcome.FIRED, dispatched_at=old)
    outbox_row(done, created_at=old, delivered_at=old)
    dead = saga("dead", started_at=old, completed_at=old)
    make_timer(dead, "remind", outcome=TimeoutOutcome.DEAD_LETTERED, dispatched_at=old)
    return {"done": done, "dead": dead, "audit": audit_record(clock.now() - timedelta(days=400))}


# -- purge_saga_data ---------------------------------------------------------------------------


def test_purge_ends_with_the_totals_line(history: dict[str, Any]) -> None:
    out, _ = run("purge_saga_data")

    assert out.startswith("Deleted saga data before ")
    assert "(dead letters kept; audit records kept)" in out
    assert last_line(out) == TOTALS.format(1, 2, 2, 1, 1, 0)
    assert set(SagaInstance.objects.values_list("correlation_key", flat=True)) == {"dead"}


def test_purge_options_override_the_retention_setting(history: dict[str, Any]) -> None:
    out, _ = run("purge_saga_data", "--no-keep-dead-lettered", "--audit-older-than", "365d")

    assert last_line(out) == TOTALS.format(2, 3, 3, 2, 1, 1)
    assert not SagaInstance.objects.exists()
    assert not SagaAuditRecord.objects.exists()


def test_purge_defaults_come_from_the_retention_setting(history: dict[str, Any]) -> None:
    retention = {"OLDER_THAN": timedelta(days=60), "AUDIT_OLDER_THAN": timedelta(days=365)}
    with override_settings(BSFT_SAGA={"RETENTION": retention}):
        out, _ = run("purge_saga_data")
    assert last_line(out) == TOTALS.format(0, 0, 0, 0, 0, 1)

    with override_settings(BSFT_SAGA={"RETENTION": {"KEEP_DEAD_LETTERED": False}}):
        out, _ = run("purge_saga_data", "--keep-dead-lettered", "--older-than", "30d")
    assert last_line(out) == TOTALS.format(1, 2, 2, 1, 1, 0)


def test_purge_dry_run_prints_what_would_go_and_deletes_nothing(history: dict[str, Any]) -> None:
    out, _ = run("purge_saga_data", "--dry-run", "--no-keep-dead-lettered")

    assert out.startswith("Would delete saga data before ")
    assert last_line(out) == TOTALS.format(2, 3, 3, 2, 1, 0)
    assert SagaInstance.objects.count() == 2


def test_purge_at_verbosity_0_prints_only_the_totals(history: dict[str, Any]) -> None:
    assert run("purge_saga_data", verbosity=0) == (TOTALS.format(1, 2, 2, 1, 1, 0) + "\n", "")


def test_purge_in_batches_of_one_deletes_the_same(history: dict[str, Any]) -> None:
    out, _ = run("purge_saga_data", "--batch-size", "1", "--no-keep-dead-lettered")

    assert last_line(out) == TOTALS.format(2, 3, 3, 2, 1, 0)


def test_purge_warns_about_a_window_shorter_than_a_day(history: dict[str, Any]) -> None:
    _, err = run("purge_saga_data", "--older-than", "12h", "--dry-run")

    assert "The retention window 12:00:00 is shorter than 1 day, 0:00:00" in err


def test_purge_keep_and_no_keep_exclude_each_other() -> None:
    with pytest.raises(CommandError, match="not allowed with argument"):
        run("purge_saga_data", "--keep-dead-lettered", "--no-keep-dead-lettered")
    with pytest.raises(CommandError, match="exclude each other"):
        run("purge_saga_data", keep_dead_lettered=True, no_keep_dead_lettered=True)


@pytest.mark.parametrize(
    "options",
    [
        {"no_keep_dead_lettered": True, "older_than": "30d"},
        {"keep_dead_lettered": False, "older_than": timedelta(days=30)},
    ],
)
def test_purge_options_given_to_call_command_mean_what_they_say(
    history: dict[str, Any], options: dict[str, Any]
) -> None:
    out, _ = run("purge_saga_data", **options)

    assert last_line(out) == TOTALS.format(2, 3, 3, 2, 1, 0)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--older-than", "30"], "--older-than: '30' is not a duration"),
        (["--audit-older-than", "1y"], "--audit-older-than: '1y' is not a duration"),
        (["--older-than", "99999999999d"], "--older-than: '99999999999d' is out of range"),
        (["--audit-older-than", "999999999d"], "--audit-older-than: '999999999d' is out of range"),
        (["--batch-size", "0"], "--batch-size must be a positive integer, got 0"),
    ],
)
def test_purge_rejects_bad_arguments_naming_them(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        run("purge_saga_data", *args)


def test_purge_saga_timeouts_is_the_timers_only_subset(history: dict[str, Any]) -> None:
    out, _ = run("purge_saga_timeouts", "--older-than", "30d")

    assert out.startswith("Deleted 2 saga timer rows")
    assert not SagaTimeout.objects.exists()
    assert SagaInstance.objects.count() == 2


def test_purge_saga_timeouts_rejects_a_window_too_long_to_measure() -> None:
    with pytest.raises(CommandError, match="--older-than: '999999999d' is out of range"):
        run("purge_saga_timeouts", "--older-than", "999999999d")


# -- the Celery task ---------------------------------------------------------------------------


def test_the_task_purges_with_the_retention_defaults(history: dict[str, Any]) -> None:
    assert purge_task.name == "bsft_saga.tasks.purge_saga_data"
    result = purge_task.apply().get()

    assert result == {
        "instances": 1,
        "inbox": 2,
        "journal": 2,
        "timeouts": 1,
        "outbox": 1,
        "kept": 0,
        "audit": 0,
        "dispatchers": 0,
    }
    with override_settings(BSFT_SAGA={"RETENTION": {"KEEP_DEAD_LETTERED": False}}):
        assert purge_task.apply().get()["instances"] == 1


def test_the_documented_beat_schedule_runs_the_drain_and_a_daily_purge() -> None:
    blocks = re.findall(r"^```python\n(.*?)^```", RETENTION_PAGE.read_text(), flags=re.S | re.M)
    [block] = [block for block in blocks if "bsft_saga.tasks.purge_saga_data" in block]
    namespace: dict[str, Any] = {}
    exec(compile(block, str(RETENTION_PAGE), "exec"), namespace)

    schedule = namespace["CELERY_BEAT_SCHEDULE"]
    names = {entry["task"] for entry in schedule.values()}
    assert names == {"bsft_saga.tasks.drain_saga_timeouts", purge_task.name}
    assert names <= set(current_app.tasks)
    assert isinstance(schedule["bsft-saga-purge"]["schedule"], crontab)


# -- erase_saga_data ---------------------------------------------------------------------------


@pytest.fixture
def customer() -> dict[str, SagaInstance]:
    earlier = clock.now() - timedelta(days=3)
    return {
        "done": saga("c-1", started_at=earlier, completed_at=earlier, events=2),
        "active": saga("c-1", started_at=clock.now()),
    }


def test_erase_ends_with_the_instances_line_and_names_the_active_one_kept(
    customer: dict[str, SagaInstance],
) -> None:
    out, err = run("erase_saga_data", REMINDER_SAGA_TYPE, "c-1")

    assert out.splitlines()[0] == (
        f"Erased 1 instance(s) of {REMINDER_SAGA_TYPE}[c-1] "
        "(inbox=2 journal=2 timeouts=0 outbox=0)."
    )
    assert last_line(out) == "instances=1"
    assert f"kept active instance {customer['active'].pk}" in err
    assert "--include-active" in err
    [record] = SagaAuditRecord.objects.all()
    assert (record.action, record.instance_id, record.user) == (
        "saga.instance.erased",
        customer["done"].pk,
        None,
    )


def test_erase_include_active_erases_both(customer: dict[str, SagaInstance]) -> None:
    out, err = run("erase_saga_data", REMINDER_SAGA_TYPE, "c-1", "--include-active")

    assert last_line(out) == "instances=2"
    assert err == ""
    assert not SagaInstance.objects.exists()
    assert SagaAuditRecord.objects.count() == 2


def test_erase_dry_run_deletes_and_records_nothing(customer: dict[str, SagaInstance]) -> None:
    out, _ = run("erase_saga_data", REMINDER_SAGA_TYPE, "c-1", "--include-active", "--dry-run")

    assert out.splitlines()[0] == f"Would erase 2 instance(s) of {REMINDER_SAGA_TYPE}[c-1]."
    assert last_line(out) == "instances=2"
    assert SagaInstance.objects.count() == 2
    assert not SagaAuditRecord.objects.exists()


def test_erase_at_verbosity_0_prints_only_the_instances_line(
    customer: dict[str, SagaInstance],
) -> None:
    assert run("erase_saga_data", REMINDER_SAGA_TYPE, "c-1", verbosity=0) == ("instances=1\n", "")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([REMINDER_SAGA_TYPE, "c\x001"], "KEY: the text holds a NUL character"),
        ([REMINDER_SAGA_TYPE, "k" * 201], "KEY is 201 characters long; at most 200"),
        (["t" * 201, "c-1"], "SAGA_TYPE is 201 characters long; at most 200"),
    ],
)
def test_erase_rejects_arguments_no_row_can_hold(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        run("erase_saga_data", *args)


def test_erase_needs_a_saga_type_and_a_key() -> None:
    with pytest.raises(CommandError, match="the following arguments are required: KEY"):
        run("erase_saga_data", REMINDER_SAGA_TYPE)


# -- check W040 --------------------------------------------------------------------------------


def w040(**sections: Any) -> list[str]:
    with override_settings(BSFT_SAGA=sections):
        return [m.msg for m in run_checks() if m.id == "bsft_saga.W040"]


def test_the_default_retention_window_passes_the_check() -> None:
    assert w040() == []


def test_a_window_shorter_than_a_day_is_warning_w040() -> None:
    [message] = w040(RETENTION={"OLDER_THAN": timedelta(hours=12)})
    assert "['RETENTION']['OLDER_THAN'] (12:00:00) is shorter than 1 day, 0:00:00" in message


def test_a_window_shorter_than_the_catch_up_age_is_warning_w040() -> None:
    messages = w040(
        RETENTION={"OLDER_THAN": timedelta(days=2)}, TIMEOUTS={"MAX_CATCH_UP_AGE": timedelta(7)}
    )
    assert len(messages) == 1
    assert "is shorter than 7 days" in messages[0]
    assert w040(RETENTION={"OLDER_THAN": timedelta(days=7)}, TIMEOUTS={"MAX_CATCH_UP_AGE": 7}) == []
