"""The step benchmark: publishing a start event, against inserting its rows by hand.

**Library**: ``publish(BenchReminderRequested(key))``. The event is routed to
``BenchReminderFlow`` (tests/testapp/load_flows.py), the engine finds no instance for the
key, runs the start step (it sets the state and schedules one reminder) and commits the
window: the instance, its inbox row and the timer row.

**Hand-written**: the same three rows in one ``transaction.atomic()``
(``baselines.start_by_hand``). ``check_baseline_writes_what_the_engine_writes()`` proves,
before anything is timed, that the two write the same rows.

Both run in this process, on the same tables, one event after another, each in its own
transaction; N events per run, A B A B over the rounds, the tables emptied (untimed)
before every run. The SQLite figure is the library side alone, in a child on a SQLite file.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

from bench import baselines, database, workloads
from bench.children import on_sqlite
from bench.config import Config
from bench.measure import Measured, clock, interleave, per_round_ratios
from bsft_saga import publish
from bsft_saga.models import SagaInboxEntry

_keys = itertools.count()


def check_baseline_writes_what_the_engine_writes() -> None:
    """Refuse to measure if ``start_by_hand`` and the engine no longer write the same rows."""
    database.reset_saga_tables()
    envelope = publish(workloads.start_event("by-engine"))
    engine = SagaInboxEntry.objects.get(message_id=envelope.message_id).saga_id
    baselines.start_by_hand("by-hand", workloads.STEP_NOTE)
    by_hand = SagaInboxEntry.objects.exclude(saga_id=engine).get().saga_id
    found = workloads.differences(workloads.rows_of(by_hand), workloads.rows_of(engine))
    database.reset_saga_tables()
    if found:
        raise workloads.WorkloadError(
            "bench/baselines.py start_by_hand no longer writes what the engine writes:\n  "
            + "\n  ".join(found)
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

    values = interleave(
        config.sizes.rounds,
        {
            "step: publish() (library)": lambda: timed(
                lambda key: publish(workloads.start_event(key))
            ),
            "step: three INSERTs by hand": lambda: timed(
                lambda key: baselines.start_by_hand(key, workloads.STEP_NOTE)
            ),
        },
    )
    library, by_hand = values.values()
    database.reset_saga_tables()
    return Measured(
        rounds={
            "step_events_per_s": library,
            "step_ratio_vs_handwritten": per_round_ratios(library, by_hand),
        },
        detail={
            "events_per_run": n,
            "library_events_per_s": library,
            "handwritten_events_per_s": by_hand,
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
