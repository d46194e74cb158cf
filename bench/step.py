"""The step benchmark: publishing a start event, against inserting its rows by hand.

**Library**: ``publish(BenchReminderRequested(key))``. The event is routed to
``BenchReminderFlow`` (tests/testapp/load_flows.py), the engine finds no instance for the
key, runs the start step (it sets the state and schedules one reminder) and commits the
window: the instance, its inbox row and the timer row.

**Hand-written**: the same three rows in one ``transaction.atomic()``
(``baselines.start_by_hand``).

**Raw, a row at a time**: the same three rows in three single-row ``INSERT`` s and one
commit per event, psycopg 3 on a connection of its own (``baselines.RawRowStart``): the
price of ``publish()``'s writes with no Python but the driver's.

**Raw set**: the same rows for 100 events at a time, in three ``INSERT … SELECT … FROM
unnest(…)`` (instances, inbox rows, timers) and one commit, psycopg 3 on a connection of its
own (``baselines.RawSetStart``): what a PostgreSQL expert would write to load start events,
the database's real limit for this work. Each ``publish()`` here commits its own event, so
the ratio prices in a commit per event as well as the library's Python.

**Bulk**: the same N start events given to one ``publish_many()`` call, which runs each
event's start step with no transaction open and commits the windows of up to its group size
(100) together, in one short transaction and a few statements: the library's answer to a
nightly import. Its ratios are over the ``publish()`` loop and over the raw set of the same
round.

``check_baselines_write_what_the_engine_writes()`` proves, before anything is timed, that
the baselines write the rows the engine writes.

All run in this process, on the same tables, the library and the hand-written one event
after another, each in its own transaction; N events per run, A B C A B C over the rounds,
the tables emptied (untimed) before every run. The SQLite figure is the library side alone,
in a child on a SQLite file.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from bench import baselines, database, workloads
from bench.children import on_sqlite
from bench.config import Config
from bench.measure import Measured, clock, interleave, per_round_ratios
from bsft_saga import PublishOutcome, publish, publish_many
from bsft_saga.models import SagaInboxEntry, SagaInstance

EVENTS_PER_COMMIT = 100  # the raw set's batch of start events

_keys = itertools.count()


def check_baselines_write_what_the_engine_writes() -> None:
    """Refuse to measure if ``start_by_hand``, ``RawRowStart`` or ``RawSetStart`` (for a
    batch of two) and the engine no longer write the same rows."""
    database.reset_saga_tables()
    envelope = publish(workloads.start_event("by-engine"))
    engine = workloads.rows_of(SagaInboxEntry.objects.get(message_id=envelope.message_id).saga_id)
    baselines.start_by_hand("by-hand", workloads.STEP_NOTE)
    with baselines.connect() as conn:
        baselines.RawRowStart.for_models().start(conn, "by-raw-row", workloads.STEP_NOTE)
        baselines.RawSetStart.for_models().start_batch(
            conn, ["by-raw-set-1", "by-raw-set-2"], workloads.STEP_NOTE
        )
    found = []
    for key, baseline in (
        ("by-hand", "start_by_hand"),
        ("by-raw-row", "RawRowStart"),
        ("by-raw-set-1", "RawSetStart"),
        ("by-raw-set-2", "RawSetStart"),
    ):
        saga = SagaInstance.objects.filter(correlation_key=key).values_list("pk", flat=True)
        if len(saga) != 1:
            found.append(f"{baseline} wrote {len(saga)} instances keyed {key!r}, not one")
            continue
        differences = workloads.differences(workloads.rows_of(saga[0]), engine)
        found += [f"{baseline}: {line}" for line in differences]
    database.reset_saga_tables()
    if found:
        raise workloads.WorkloadError(
            "bench/baselines.py no longer writes what the engine writes:\n  " + "\n  ".join(found)
        )


def run(config: Config) -> Measured:
    n = config.sizes.events

    def timed(start: Callable[[str], object]) -> float:
        database.reset_saga_tables()
        began = clock()
        for _ in range(n):
            start(f"step-{next(_keys):07d}")
        rate = n / (clock() - began)
        workloads.check_started(n)
        return rate

    raw_row = baselines.RawRowStart.for_models()
    raw_set = baselines.RawSetStart.for_models()

    def timed_in_sets(conn: psycopg.Connection[Any]) -> float:
        database.reset_saga_tables()
        began = clock()
        for first in range(0, n, EVENTS_PER_COMMIT):
            keys = [f"step-{next(_keys):07d}" for _ in range(min(EVENTS_PER_COMMIT, n - first))]
            raw_set.start_batch(conn, keys, workloads.STEP_NOTE)
        rate = n / (clock() - began)
        workloads.check_started(n)
        return rate

    def timed_in_bulk() -> float:
        database.reset_saga_tables()
        events = [workloads.start_event(f"step-{next(_keys):07d}") for _ in range(n)]
        began = clock()
        published = publish_many(events)
        rate = n / (clock() - began)
        outcomes = {result.outcome for result in published}
        if outcomes != {PublishOutcome.STARTED}:
            raise workloads.WorkloadError(f"publish_many(): outcomes {outcomes}, not STARTED")
        workloads.check_started(n)
        return rate

    with baselines.connect() as conn:
        values = interleave(
            config.sizes.rounds,
            {
                "step: publish() (library)": lambda: timed(
                    lambda key: publish(workloads.start_event(key))
                ),
                "step: three INSERTs by hand": lambda: timed(
                    lambda key: baselines.start_by_hand(key, workloads.STEP_NOTE)
                ),
                "step: raw psycopg, a commit each": lambda: timed(
                    lambda key: raw_row.start(conn, key, workloads.STEP_NOTE)
                ),
                "step: raw set-based, 100 a commit": lambda: timed_in_sets(conn),
                "step: publish_many() (library, bulk)": timed_in_bulk,
            },
        )
    library, by_hand, by_row, in_sets, bulk = values.values()
    database.reset_saga_tables()
    return Measured(
        rounds={
            "step_events_per_s": library,
            "step_ratio_vs_handwritten": per_round_ratios(library, by_hand),
            "step_events_per_s_raw_row": by_row,
            "step_ratio_vs_raw_row": per_round_ratios(library, by_row),
            "step_events_per_s_raw_set": in_sets,
            "step_ratio_vs_raw_set": per_round_ratios(library, in_sets),
            "bulk_step_events_per_s": bulk,
            "bulk_step_ratio_vs_publish_loop": per_round_ratios(bulk, library),
            "bulk_step_ratio_vs_raw_set": per_round_ratios(bulk, in_sets),
        },
        detail={
            "events_per_run": n,
            "library_events_per_s": library,
            "handwritten_events_per_s": by_hand,
            "raw_row_events_per_s": by_row,
            "raw_set_events_per_s": in_sets,
            "raw_set_events_per_commit": EVENTS_PER_COMMIT,
            "bulk_events_per_s": bulk,
        },
    )


def run_sqlite(config: Config, workdir: Path) -> Measured:
    """The library side of the step benchmark on a SQLite file, in a child process."""
    n, rounds = config.sizes.sqlite_events, config.sizes.rounds
    args = ("--events", str(n), "--rounds", str(rounds))
    rates = on_sqlite(
        workdir,
        "sqlite-step",
        *args,
        timeout=120 + rounds * n / 10,
        label="step on SQLite: publish()",
    )
    return Measured(
        rounds={"sqlite_step_events_per_s": rates},
        detail={"events_per_run": n, "library_events_per_s": rates},
    )
