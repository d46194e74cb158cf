"""Many processes at once: dispatchers draining a large backlog, writers racing on a timer.

The children are ``tests/workers/timer_drain.py`` and ``tests/workers/timer_race.py``,
started with the environment of the ``subprocess_env`` fixture and released together.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db.models import Count, Q
from django.utils import timezone

from bsft_saga import publish
from bsft_saga.events import codec
from bsft_saga.models import (
    SagaInstance,
    SagaTimeout,
    TimeoutOutcome,
)
from bsft_saga.timeouts import drain_due
from tests.support.processes import supervised
from tests.support.services import require_server_database
from tests.testapp.bulk import bulk_start_counters
from tests.testapp.load_events import CountStarted, CountWake, SoakStarted
from tests.testapp.load_flows import RACE_TIMER, CountingFlow, RaceFlow, SoakReminderFlow

BACKLOG = 10_000
DISPATCHERS = 4
BATCH_SIZE = 200
RACE_KEYS = 40
# About a minute on an idle 2-core box; the bounds leave room for a busy one, so that only a
# wrong result fails the test, never a slow machine (a hang still ends at these bounds).
DRAIN_SECONDS = 420


# trace_context: the engine stores its step's span when an earlier test installed a tracer
# provider; the bulk rows never come from a step.
_VOLATILE = {
    "id",
    "saga_id",
    "correlation_key",
    "message_id",
    "correlation_id",
    "payload",
    "trace_context",
}


def _shape(saga: SagaInstance) -> dict[str, Any]:
    """The rows of ``saga`` minus ids and the key; times relative to its creation."""

    def strip(row: Mapping[str, Any]) -> dict[str, Any]:
        return {
            k: (v - saga.created_at if isinstance(v, datetime) else v)
            for k, v in row.items()
            if k not in _VOLATILE
        }

    return {
        "instance": strip(SagaInstance.objects.filter(pk=saga.pk).values().get()),
        "inbox": [strip(r) for r in saga.inbox_entries.values()],
        "timers": [strip(r) for r in saga.timeouts.values()],
        "payloads": [
            codec.decode(CountWake, r) for r in saga.timeouts.values_list("payload", flat=True)
        ],
    }


@pytest.mark.django_db
def test_bulk_rows_have_the_shape_the_engine_writes() -> None:
    publish(CountStarted("by-engine"))
    by_engine = SagaInstance.objects.get(correlation_key="by-engine")
    bulk_start_counters(["in-bulk"], by_engine.created_at)
    in_bulk = SagaInstance.objects.get(correlation_key="in-bulk")

    assert _shape(in_bulk) == {**_shape(by_engine), "payloads": [CountWake("in-bulk")]}


@pytest.mark.django_db
def test_the_soak_flow_completes_when_its_reminder_fires() -> None:
    publish(SoakStarted("soak-1", remind_after_ms=2500))
    saga = SagaInstance.objects.get(saga_type=SoakReminderFlow.saga_type)
    timer = saga.timeouts.get()
    assert timer.due_at - timer.scheduled_at == timedelta(milliseconds=2500)

    report = drain_due(now=timer.due_at)

    saga.refresh_from_db()
    assert (report.fired, saga.is_complete, saga.inbox_entries.count()) == (1, True, 2)


@pytest.mark.slow
@pytest.mark.timeout(DRAIN_SECONDS + 120)
def test_four_dispatchers_fire_ten_thousand_due_timers_exactly_once(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    require_server_database()
    keys = [f"load-{i:05d}" for i in range(BACKLOG)]
    bulk_start_counters(keys, timezone.now())

    with supervised(subprocess_env, tmp_path) as children:
        names = [f"dispatcher-{n}" for n in range(DISPATCHERS)]
        dispatchers = [
            children.spawn(
                "timer_drain.py",
                "--batch-size",
                str(BATCH_SIZE),
                "--no-sync-commit",
                "--max-seconds",
                str(DRAIN_SECONDS),
                *children.barrier_args(name),
                name=name,
            )
            for name in names
        ]
        children.release_together(dispatchers)
        reports = [d.report(timeout=DRAIN_SECONDS + 30) for d in dispatchers]

    assert sum(r["fired"] for r in reports) == BACKLOG
    assert sum(r["failed"] + r["dead_lettered"] + r["missed"] for r in reports) == 0
    # The work was shared: each claim locks only its batch, down the index of the ready order.
    assert sum(1 for r in reports if r["fired"]) > 1, reports
    sagas = SagaInstance.objects.filter(saga_type=CountingFlow.saga_type)
    assert sagas.count() == BACKLOG
    assert not sagas.exclude(step_index=2, version=2, state__count=1).exists()
    assert not sagas.annotate(inbox=Count("inbox_entries")).exclude(inbox=2).exists()
    timers = SagaTimeout.objects.filter(saga__saga_type=CountingFlow.saga_type)
    assert timers.count() == BACKLOG
    assert not timers.filter(~Q(outcome=TimeoutOutcome.FIRED) | Q(outcome=None)).exists()
    assert not timers.exclude(claimed_until=None).exists()  # every delivery confirmed


@pytest.mark.slow
def test_two_processes_rescheduling_one_timer_name_leave_one_pending_row(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    keys = [f"race-{uuid.uuid4().hex[:8]}-{i}" for i in range(RACE_KEYS)]

    with supervised(subprocess_env, tmp_path) as children:
        racers = [
            children.spawn(
                "timer_race.py",
                "--name",
                name,
                "--keys",
                ",".join(keys),
                *children.barrier_args(name),
                name=name,
            )
            for name in ("a", "b")
        ]
        children.release_together(racers)
        for racer in racers:
            racer.report(timeout=120)  # exit 0: publish never raised

    for key in keys:
        saga = SagaInstance.objects.get(saga_type=RaceFlow.saga_type, correlation_key=key)
        # Both start events raced to create it, both bumps applied, each step rescheduled.
        assert (saga.step_index, sorted(saga.state["bumped_by"])) == (3, ["a", "b"])
        pending = saga.timeouts.filter(name=RACE_TIMER).pending()
        assert [t.scheduled_step_index for t in pending] == [3]
