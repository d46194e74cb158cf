"""``make bench``: measure bsft_saga against hand-written Django on the local PostgreSQL
(and its drain on MariaDB, where a server is: bench/mariadb.py; and publishing from a view
over HTTP, where gunicorn and hey are: bench/web.py).

    .venv/bin/python -m bench.run               # full size (the lead, on a quiet machine)
    BENCH_SIZE=smoke .venv/bin/python -m bench.run  # about a minute, to see that it runs

Writes bench/results/latest.json and the numbers section of docs/performance.md, draws
docs/images/performance.svg from them (bench/chart.py), and prints a summary table. What
each figure measures and why the comparison is fair is in the docstrings of bench/step.py,
drain.py, slow_receiver.py, poll.py and web.py (and of the baselines, bench/baselines.py),
and in docs/performance.md; the sizes and their environment variables are in
bench/config.py and bench/README.md.

The bench works in its own database (``bsft_saga_bench``, created if missing), empties its
saga tables before and after, and creates and drops two more for the poll; it never
touches the test databases.
"""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from bench import chart, database
from bench import config as bench_config
from bench.measure import clock, progress


def main() -> int:
    config = bench_config.from_environment()
    began = clock()
    database.ensure_database(config, config.database)
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    os.environ["DATABASE_URL"] = config.database_url()  # never a test database
    import django

    django.setup()
    from django.core.management import call_command

    from bench import drain, mariadb, poll, report, slow_receiver, statements, step, web
    from bsft_saga.conf import saga_settings

    call_command("migrate", verbosity=0)
    delivery = saga_settings.delivery
    batch_size = config.batch_size or delivery.batch_size
    print(
        f"make bench: {config.size} size, {config.sizes}, database {config.database}",
        file=sys.stderr,
    )
    load_before = os.getloadavg()
    rounds: dict[str, list[float]] = {}
    detail = {}
    try:
        step.check_baselines_write_what_the_engine_writes()
        progress("counting statements per unit of work")
        counted = statements.count(config.batch_size, batch_size)
        with tempfile.TemporaryDirectory(prefix="bsft-saga-bench-") as tmp:
            workdir = Path(tmp)
            for name, measure in (
                ("step", lambda: step.run(config)),
                ("drain", lambda: drain.run(config, workdir)),
                ("slow_receivers", lambda: slow_receiver.run(config, workdir)),
                ("poll", lambda: poll.run(config, workdir, batch_size)),
                ("rss", lambda: drain.run_rss(config, workdir)),
                ("sqlite_step", lambda: step.run_sqlite(config, workdir)),
                ("sqlite_drain", lambda: drain.run_sqlite(config, workdir)),
                ("mariadb_drain", lambda: mariadb.run(config, workdir)),
                ("web", lambda: web.run(config, workdir)),
            ):
                measured = measure()
                rounds.update(measured.rounds)
                detail[name] = measured.detail
    finally:
        database.reset_saga_tables()

    document = report.build(
        size=config.size,
        sizes=asdict(config.sizes),
        rounds=rounds,
        detail=detail,
        facts={
            "batch_size": batch_size,
            "library_settings": {
                "catch_up_policy": saga_settings.timers.catch_up_policy,
                "claim_lease_s": delivery.claim_lease.total_seconds(),
            },
            "machine": {
                **report.machine_facts(),
                "load_average_before": [round(x, 2) for x in load_before],
                "load_average_after": [round(x, 2) for x in os.getloadavg()],
            },
            "postgresql": {**database.server_facts(), **database.commit_latency()},
            "django": django.get_version(),
            "duration_s": round(clock() - began, 1),
            "statements": counted,
        },
    )
    report.write(document)
    progress(f"drew {chart.draw(document).relative_to(chart.ROOT)}")
    print(report.summary(document))
    return 0


if __name__ == "__main__":
    sys.exit(main())
