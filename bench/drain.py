"""The drain benchmark (workload W) and the dispatcher's memory.

**Library**: ``drain_due()`` passes, in a child process, until a pass settles nothing; with
two children at once for the scaling figure. **Hand-written**: ``baselines.fire_one_by_hand``
in a loop, in one child. **Raw**: ``baselines.RawBatch`` (psycopg 3 without Django, a
``SKIP LOCKED`` poll of ``BATCH_SIZE`` and one commit per batch, the library's statements)
in a loop, in one child: the ceiling, what firing W costs with no Python but the driver's.
**Raw set**: ``baselines.RawSetDrain`` (the same poll and batch, then one statement per
table for the whole batch: a version-checked ``UPDATE … FROM unnest(…)`` of the sagas, one
``INSERT`` of the inbox rows, one stamp), in one child: what a PostgreSQL expert would
write, the database's real limit for W.
Each run starts from the same freshly written W (N due reminders, bench/workloads.py),
empty tables otherwise, statistics fresh; none of that is timed.

A run's time is from the go file to the last child's finish, as the children report them
on the system-wide monotonic clock: Django's start-up, connecting and writing W are outside
it. After every run the rows are checked (each saga woken exactly once) before the rate
counts. The rounds run library 1p, hand-written 1p, raw 1p, raw set 1p, library 2p, library
2p on W2, library 1p traced, and again: each ratio is taken between neighbours of one round.

**Two timers per saga**: W2 (bench/workloads.py) holds as many due timers as W, two per
saga, fallen due at random instants of the last ten minutes, so that a saga's second timer
is often in flight in the other dispatcher's batch while the first fires: its window then
loses the version race and is delivered again. The ratio is its rate over W's, both with
two processes; firing either timer writes what firing W's does (a version-checked advance,
an inbox row, a stamp), so what it prices in is that contention. This is where that speed
is measured: tests/processes/test_dispatch_contention.py runs the same kind of backlog with
eight dispatchers and checks only what it must never get wrong (no deadlock, each timer's
effect once).

**Traced**: the library's 1-process drain of W again, with an OpenTelemetry SDK tracer
provider installed in the dispatcher (spans batched and dropped, bench/child.py) and each
timer carrying a stored trace context, as one scheduled under a traced request does: every
timer then opens its ``saga.timeout`` span with a link and its step's ``saga.step``. The
ratio is its rate over the untraced one of the same round; the untraced runs are as before.

**SQLite**: the library's 1-process drain of W on a SQLite file (the embedded default), in
a child, with nothing to interleave with: a figure without a target.

**RSS**: the peak resident set size (``ru_maxrss``) of a library dispatcher that drained a
small and a large W, one run each. Both include Django's start-up, so their difference is
what draining more timers costs in memory: it should not grow with the backlog.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench import database, workloads
from bench.children import Children, child_environment, on_sqlite
from bench.config import Config
from bench.measure import Measured, interleave, per_round_ratios, progress

MIN_RATE = 10  # timers a second below which a run is taken for hung (bounds each wait)


def drain_once(
    config: Config,
    workdir: Path,
    mode: str,
    processes: int,
    n: int,
    *,
    backlog: workloads.Backlog = workloads.REMINDERS,
    args: tuple[str, ...] = (),
    traced: bool = False,
) -> dict[str, Any]:
    """Write ``backlog`` (W by default) with ``n`` due timers, drain it with ``processes``
    children of ``mode`` ("drain", "handwritten", "raw" or "raw-set", given ``args``); return
    the rate and what the children reported."""
    batch = ["--batch-size", str(config.batch_size)] if config.batch_size else []
    n = backlog.timers(n)
    if traced:
        args = (*args, "--traced")
    with Children(workdir, child_environment(config.database_url())) as children:
        # Started first, so that their start-up overlaps writing the rows.
        started = [children.spawn(f"{mode}-{i}", mode, *batch, *args) for i in range(processes)]
        database.reset_saga_tables()
        workloads.write(backlog, n)
        if traced:
            workloads.store_trace_context(backlog)
        database.vacuum_analyze()
        workloads.check_due(backlog, n)
        children.release(started)
        reports = [child.report(timeout=60 + n / MIN_RATE) for child in started]
    workloads.check_fired(backlog, n)
    problems = sum(r["failed"] + r["missed"] + r["dead_lettered"] for r in reports)
    if sum(r["fired"] for r in reports) != n or problems:
        raise workloads.WorkloadError(f"{mode} x{processes}: the children reported {reports}")
    seconds = max(r["finished"] for r in reports) - min(r["started"] for r in reports)
    return {"timers_per_s": n / seconds, "seconds": seconds, "children": reports}


def run(config: Config, workdir: Path) -> Measured:
    n = config.sizes.timers
    runs: dict[str, list[dict[str, Any]]] = {
        "library_1p": [],
        "handwritten_1p": [],
        "raw_batch_1p": [],
        "raw_set_1p": [],
        "library_2p": [],
        "library_2p_two_timers_per_saga": [],
        "library_1p_traced": [],
    }

    def rate(
        name: str,
        mode: str,
        processes: int,
        backlog: workloads.Backlog = workloads.REMINDERS,
        *,
        traced: bool = False,
    ) -> float:
        result = drain_once(config, workdir, mode, processes, n, backlog=backlog, traced=traced)
        runs[name].append(result)
        return float(result["timers_per_s"])

    values = interleave(
        config.sizes.rounds,
        {
            "drain: drain_due(), 1 process": lambda: rate("library_1p", "drain", 1),
            "drain: hand-written, 1 process": lambda: rate("handwritten_1p", "handwritten", 1),
            "drain: raw psycopg, 1 process": lambda: rate("raw_batch_1p", "raw", 1),
            "drain: raw set-based, 1 process": lambda: rate("raw_set_1p", "raw-set", 1),
            "drain: drain_due(), 2 processes": lambda: rate("library_2p", "drain", 2),
            "drain: 2 processes, 2 timers/saga": lambda: rate(
                "library_2p_two_timers_per_saga", "drain", 2, workloads.NOTICES
            ),
            "drain: drain_due(), 1 process, traced": lambda: rate(
                "library_1p_traced", "drain", 1, traced=True
            ),
        },
    )
    library_1p, by_hand, raw, raw_set, library_2p, two_timers, traced = values.values()
    database.reset_saga_tables()
    return Measured(
        rounds={
            "drain_timers_per_s_1p": library_1p,
            "drain_timers_per_s_2p": library_2p,
            "drain_ratio_vs_handwritten": per_round_ratios(library_1p, by_hand),
            "drain_timers_per_s_raw_batch": raw,
            "drain_ratio_vs_raw_batch": per_round_ratios(library_1p, raw),
            "drain_timers_per_s_raw_set": raw_set,
            "drain_ratio_vs_raw_set": per_round_ratios(library_1p, raw_set),
            "drain_scaling_2p_vs_1p": per_round_ratios(library_2p, library_1p),
            "drain_ratio_two_timers_per_saga": per_round_ratios(two_timers, library_2p),
            "drain_ratio_traced_vs_untraced": per_round_ratios(traced, library_1p),
        },
        detail={"timers_per_run": n, **runs},
    )


def run_sqlite(config: Config, workdir: Path) -> Measured:
    """The library's drain of W on a SQLite file, in a child process (rounds in a row)."""
    n, rounds = config.sizes.timers, config.sizes.rounds
    batch = ["--batch-size", str(config.batch_size)] if config.batch_size else []
    args = ("--timers", str(n), "--rounds", str(rounds), *batch)
    rates = on_sqlite(
        workdir,
        "sqlite-drain",
        *args,
        timeout=120 + rounds * n / MIN_RATE,
        label="drain on SQLite: drain_due()",
    )
    return Measured(
        rounds={"sqlite_drain_timers_per_s": rates},
        detail={"timers_per_run": n, "library_timers_per_s": rates},
    )


def run_rss(config: Config, workdir: Path) -> Measured:
    found: dict[str, Any] = {}
    for label, n in (("small", config.sizes.rss_small), ("large", config.sizes.rss_large)):
        result = drain_once(config, workdir, "drain", 1, n)
        (child,) = result["children"]
        found[label] = {"timers": n, **child, "timers_per_s": result["timers_per_s"]}
        progress(f"rss after {n} timers{'':<19} {child['max_rss_kb'] / 1024:>12.2f} MB")
    database.reset_saga_tables()
    return Measured(
        rounds={  # one run each: a peak is not noisy the way a rate is
            "dispatcher_rss_mb_10k": [found["small"]["max_rss_kb"] / 1024],
            "dispatcher_rss_mb_100k": [found["large"]["max_rss_kb"] / 1024],
        },
        detail=found,
    )
