"""The poll benchmark: what one claim of a batch costs with a small and a large timer table.

The due-poll is ``bsft_saga.delivery.claim.claim`` for the timer channel: select a batch of
ready timers (``FOR UPDATE SKIP LOCKED``, with their sagas) and stamp them claimed. It runs
on every pass, found work or not, so its cost must not grow with the number of pending
timers that are not due yet.

Each table size gets its own database (created for the run, dropped after it) and its own
child, which writes W with all but one batch of the timers a day or more in the future,
then times claims on request, each inside a transaction that is rolled back, so that
every repetition sees the same rows. The parent asks the two children in turn, small then
large, round after round: the ratio is taken between the two halves of one round. A
first, untimed request per child warms its caches and plans.
"""

from __future__ import annotations

from pathlib import Path

from bench import database
from bench.children import Children, child_environment
from bench.config import Config
from bench.measure import Measured, median, per_round_ratios, progress

WARM_UP_CLAIMS = 20


def run(config: Config, workdir: Path, batch_size: int) -> Measured:
    sizes = config.sizes
    tables = {"small": sizes.poll_small, "large": sizes.poll_large}
    names = {label: f"{config.database}_poll_{label}" for label in tables}
    for name in names.values():
        database.recreate_database(config, name)
    try:
        with Children(workdir, child_environment(config.database_url())) as children:
            pollers = {
                label: children.spawn(
                    f"poll-{label}",
                    "poll",
                    *("--rows", str(rows), "--due", str(batch_size)),
                    barrier=False,
                    interactive=True,
                    env=child_environment(config.database_url(names[label])),
                )
                for label, rows in tables.items()
            }
            for poller in pollers.values():  # both set up at once; wait for each
                poller.read()
            for poller in pollers.values():
                poller.ask(f"claim {WARM_UP_CLAIMS}")
            rounds: dict[str, list[list[float]]] = {label: [] for label in tables}
            for number in range(1, sizes.rounds + 1):
                for label, poller in pollers.items():
                    milliseconds = poller.ask(f"claim {sizes.poll_reps}")["ms"]
                    rounds[label].append(milliseconds)
                    progress(
                        f"round {number}/{sizes.rounds}  poll: claim, {tables[label]:>9} rows"
                        f"{'':<8} {median(milliseconds):>9.3f} ms"
                    )
    finally:
        for name in names.values():
            database.drop_database(config, name)
    small, large = ([median(ms) for ms in rounds[label]] for label in tables)
    return Measured(
        rounds={
            "poll_ms_10k": small,
            "poll_ms_1m": large,
            "poll_ratio_1m_vs_10k": per_round_ratios(large, small),
        },
        detail={
            "rows": tables,
            "due": batch_size,
            "claims_per_round": sizes.poll_reps,
        },
    )
