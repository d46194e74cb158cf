"""The sample project: ``make demo`` tells its story, and its Celery app beats the drain.

The demo runs in a subprocess, as ``make demo`` does (``migrate`` then ``run_demo`` with
``DJANGO_SETTINGS_MODULE=sample_project.settings``), against a SQLite file of its own and a
broker URL nothing listens on: it must need neither Redis nor the suite's database.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from celery import Celery
from django.conf import settings
from django.test import override_settings

from bsft_saga.checks import check_beat_schedule
from bsft_saga.tasks import DRAIN_TASK
from sample_project.celery import DRAIN_ENTRY, schedule_drain
from sample_project.celery import app as sample_celery_app

ROOT = Path(__file__).resolve().parents[2]


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, f"manage.py {' '.join(args)} failed:\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def demo_runs(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """``make demo``'s two commands, ``migrate`` and ``run_demo``, run once for the module."""
    if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.sqlite3":
        pytest.skip(
            "the demo always runs on a SQLite file of its own; make test runs it once, "
            "in the SQLite run"
        )
    database = tmp_path_factory.mktemp("demo") / "demo.sqlite3"
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("CELERY_", "BSFT_SAGA_", "DJANGO_"))
    }
    env.update(
        DJANGO_SETTINGS_MODULE="sample_project.settings",
        DATABASE_URL=f"sqlite:///{database}",
        # Nothing listens there: an enqueue would be logged as "could not enqueue".
        CELERY_BROKER_URL="redis://127.0.0.1:9/0",
        PYTHONPATH=str(ROOT),
    )
    return _run(["migrate", "--noinput"], env), _run(["run_demo"], env)


@pytest.fixture(scope="module")
def demo(
    demo_runs: tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]],
) -> subprocess.CompletedProcess[str]:
    """What ``run_demo`` printed."""
    return demo_runs[1]


def journey(output: str, saga_type: str, key: str) -> str:
    """The block ``run_demo`` prints for one instance: its header line and indented rows."""
    match = re.search(
        rf"^{re.escape(saga_type)} \[{re.escape(key)}\].*\n(?:    .*\n)*", output, re.MULTILINE
    )
    assert match, f"no journey for {saga_type} [{key}] in:\n{output}"
    return match.group(0)


@pytest.mark.slow
def test_demo_fires_the_follow_up_two_berlin_business_days_later_across_dst(
    demo: subprocess.CompletedProcess[str],
) -> None:
    q1 = journey(demo.stdout, "quotes.follow-up", "q-1")

    # Sent Friday 10:00 UTC (11:00 CET); due Tuesday 11:00 CEST, which is 09:00 UTC.
    assert re.search(
        r"timer\s+followup\s+due Tue 2026-03-31 09:00 UTC \(11:00 CEST in Berlin\)\s+fired"
        r"\s+at Tue 2026-03-31 09:00 UTC",
        q1,
    ), q1
    assert re.search(r"timer\s+callback\s+due Wed 2026-04-01 09:00 UTC .*fired", q1), q1
    assert "Tue 2026-03-31 09:00 UTC     follow-up e-mail for quote q-1 sent" in demo.stdout
    # The reminders moved no step, and the journal still tells of them.
    assert re.search(
        r"journal\s+Tue 2026-03-31 09:00 UTC\s+timer_fired\s+via timer\s+followup\s+woke no step",
        q1,
    ), q1


@pytest.mark.slow
def test_demo_cancels_both_reminders_of_a_quote_accepted_before_them(
    demo: subprocess.CompletedProcess[str],
) -> None:
    q2 = journey(demo.stdout, "quotes.follow-up", "q-2")

    assert "step_index=2  is_complete=True" in q2
    assert '"accepted": true' in q2
    assert re.search(r"timer\s+followup\s+due .*canceled\s+at Mon 2026-03-30 09:00 UTC", q2), q2
    assert re.search(r"timer\s+callback\s+due .*canceled\s+at Mon 2026-03-30 09:00 UTC", q2), q2
    assert "quote q-2 sent" not in demo.stdout


@pytest.mark.slow
def test_demo_order_reserved_through_the_outbox_paid_and_shipped_completes(
    demo: subprocess.CompletedProcess[str],
) -> None:
    o1 = journey(demo.stdout, "orders.fulfilment", "o-1")

    assert "warehouse: stock reserved for order o-1" in demo.stdout
    assert "step_index=4  is_complete=True" in o1
    assert '"status": "shipped"' in o1
    assert re.search(r"timer\s+payment\s+due .*canceled", o1), o1


@pytest.mark.slow
def test_demo_order_without_payment_is_canceled_by_its_payment_timer(
    demo: subprocess.CompletedProcess[str],
) -> None:
    o2 = journey(demo.stdout, "orders.fulfilment", "o-2")

    assert "step_index=3  is_complete=True" in o2
    assert '"status": "canceled"' in o2
    assert re.search(
        r"timer\s+payment\s+due Sat 2026-03-28 10:00 UTC .*fired\s+at Sat 2026-03-28 10:00 UTC", o2
    ), o2
    assert "warehouse: stock released for order o-2" in demo.stdout
    # Its journal says the timer, not an event someone published, ended it.
    assert re.search(
        r"journal\s+Sat 2026-03-28 10:00 UTC\s+completed\s+via timer\s+payment\s+step 2 -> 3", o2
    ), o2


@pytest.mark.slow
def test_demo_ends_with_a_summary_the_status_and_an_explained_empty_drain(
    demo: subprocess.CompletedProcess[str],
) -> None:
    assert "4 sagas (4 complete, 0 active); 6 timers: 3 fired, 3 canceled" in demo.stdout
    assert (
        "manage.py saga_status: 0 active sagas, 0 pending timers, 0 due, 0 dead letters, "
        "lag_seconds=0." in demo.stdout
    )
    last = demo.stdout.rstrip().splitlines()[-1]
    assert last.startswith("Nothing was left for the next beat tick: every timer above fired")
    assert last.endswith("fired=0 missed=0 failed=0 dead_lettered=0 unclaimed=0 delivered=0")
    assert "could not enqueue" not in demo.stderr
    assert "Traceback" not in demo.stderr


@pytest.mark.slow
def test_demo_migrates_without_a_warning(
    demo_runs: tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]],
) -> None:
    migrate = demo_runs[0]

    assert "WARNINGS" not in migrate.stdout + migrate.stderr
    assert "bsft_saga.W001" not in migrate.stdout + migrate.stderr


# --- the sample project's Celery app (in-process) -------------------------------------


def test_celery_app_schedules_the_drain_task_every_poll_interval() -> None:
    probe = Celery("probe", set_as_current=False)
    probe.conf.beat_schedule = {"nightly": {"task": "reports.nightly", "schedule": 86400}}

    with override_settings(BSFT_SAGA={"DELIVERY": {"POLL_INTERVAL": 7}}):
        schedule_drain(sender=probe)

    assert probe.conf.beat_schedule == {
        DRAIN_ENTRY: {"task": DRAIN_TASK, "schedule": timedelta(seconds=7)},
        "nightly": {"task": "reports.nightly", "schedule": 86400},
    }


def test_celery_app_passes_the_beat_schedule_check() -> None:
    sample_celery_app.set_current()

    assert sample_celery_app.conf.beat_schedule[DRAIN_ENTRY]["task"] == DRAIN_TASK
    assert check_beat_schedule() == []
