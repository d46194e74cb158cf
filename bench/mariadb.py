"""The drain benchmark on MariaDB: the library against the hand-written loop there too.

**Library**: ``drain_due()`` passes in one child process, until a pass settles nothing.
**Hand-written**: ``baselines.fire_one_by_hand`` in a loop, in one child: the same ORM code
as on PostgreSQL (``SELECT … FOR UPDATE SKIP LOCKED`` of the oldest due timer, five
statements and one commit per reminder). Both drain workload W, written afresh before each
run (``workloads.write``, which clones the template's rows with ``bulk_create`` there),
with the saga tables emptied by ``TRUNCATE`` and their statistics fresh (``ANALYZE TABLE``)
before it, none of it timed. The runs are bench/drain.py's own (``drain.drain_once``, with
the children on MariaDB), interleaved library, hand-written, library, … as on PostgreSQL,
and each saga is checked to have been woken exactly once after every run.

The server is ``BENCH_MARIADB_HOST:BENCH_MARIADB_PORT`` (user ``BENCH_MARIADB_USER``, no
password; 127.0.0.1:3306, ``root`` by default). The bench works in its own database there,
of the same name as on PostgreSQL (``bsft_saga_bench``), created ``utf8mb4`` if missing and
migrated, with the connection options of tests/settings.py (``READ COMMITTED``). It never
connects to the test databases.

``make bench`` runs this module in an interpreter of its own (Django is set up once per
process, and the bench's is on PostgreSQL): ``run()`` is the parent side. Without
mysqlclient, or without a server to connect to, it says so and reports no MariaDB figure;
their target is then "not measured", neither met nor failed.

    BENCH_SIZE=smoke .venv/bin/python -m bench.mariadb   # this benchmark alone

prints each round on stderr and its findings as one JSON line on stdout, and writes nothing
else: neither bench/results/latest.json nor docs/performance.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import config as bench_config
from bench.children import ROOT, child_environment
from bench.config import Config
from bench.measure import Measured, clock, interleave, median, per_round_ratios, progress

#: Where the driver comes from when it is missing.
DRIVER_HINT = (
    "pip install -e '.[mysql]', which builds against the client library "
    "(apt-get install default-libmysqlclient-dev build-essential pkg-config)"
)
#: Reported with the results: what decides how much a commit costs on this server.
SERVER_VARIABLES = (
    "version",
    "innodb_flush_log_at_trx_commit",
    "sync_binlog",
    "log_bin",
    "innodb_buffer_pool_size",
    "innodb_doublewrite",
    "tx_isolation",  # the session's, as Django set it; MariaDB before 11.1 and MySQL 5.7
    "transaction_isolation",  # MariaDB 11.1+ and MySQL 8
)


def run(config: Config, workdir: Path) -> Measured:
    """Run this benchmark on MariaDB in a fresh interpreter; no keys when it cannot.

    Its progress goes straight to stderr; what it found comes back as the last line it
    prints. A benchmark that fails (a child, or the check of the rows) fails ``make bench``.
    """
    from bench import drain  # after Django's set-up, as bench/run.py imports it

    n, rounds = config.sizes.timers, config.sizes.rounds
    result = subprocess.run(
        [sys.executable, "-m", "bench.mariadb"],
        env=child_environment(config.on_mariadb().database_url()),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        timeout=300 + 2 * rounds * (60 + n / drain.MIN_RATE),
        check=False,
    )
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        raise RuntimeError(f"the MariaDB benchmark exited with {result.returncode}")
    found: dict[str, Any] = json.loads(lines[-1])
    if "unavailable" in found:
        return Measured(rounds={}, detail=found)
    return Measured(rounds=found["rounds"], detail=found["detail"])


def unavailable(config: Config) -> str | None:
    """Why the MariaDB figures cannot be measured (no driver, no server), or None."""
    try:
        import MySQLdb
    except ImportError as exc:
        return f"mysqlclient is not installed ({exc}): {DRIVER_HINT}"
    try:
        MySQLdb.connect(**_server(config), connect_timeout=3).close()
    except MySQLdb.OperationalError as exc:
        return (
            f"MariaDB is not reachable at {config.mariadb_host}:{config.mariadb_port} "
            f"(user {config.mariadb_user}): {exc}"
        )
    return None


def ensure_database(config: Config) -> None:
    """Create the bench's database on MariaDB unless it exists: ``utf8mb4`` compared byte
    for byte, as the test databases (tests/settings.py)."""
    import MySQLdb

    assert config.database.startswith("bsft_saga_bench"), config.database
    conn = MySQLdb.connect(**_server(config), connect_timeout=3)
    try:
        conn.cursor().execute(
            f"CREATE DATABASE IF NOT EXISTS `{config.database}` "
            "CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
        )
    finally:
        conn.close()


def _server(config: Config) -> dict[str, Any]:
    return {"host": config.mariadb_host, "port": config.mariadb_port, "user": config.mariadb_user}


def measure(config: Config, workdir: Path) -> Measured:
    """The interleaved rounds (Django set up on the MariaDB database)."""
    from bench import drain

    n = config.sizes.timers
    runs: dict[str, list[dict[str, Any]]] = {"library_1p": [], "handwritten_1p": []}

    def rate(name: str, mode: str) -> float:
        result = drain.drain_once(config, workdir, mode, 1, n)
        runs[name].append(result)
        return float(result["timers_per_s"])

    values = interleave(
        config.sizes.rounds,
        {
            "MariaDB: drain_due(), 1 process": lambda: rate("library_1p", "drain"),
            "MariaDB: hand-written, 1 process": lambda: rate("handwritten_1p", "handwritten"),
        },
    )
    library, by_hand = values.values()
    return Measured(
        rounds={
            "mariadb_drain_timers_per_s": library,
            "mariadb_drain_timers_per_s_handwritten": by_hand,
            "mariadb_drain_ratio_vs_handwritten": per_round_ratios(library, by_hand),
        },
        detail={"server": server_facts(), "timers_per_run": n, **runs},
    )


def server_facts() -> dict[str, Any]:
    """The server's version and commit settings, the session's isolation level, and the
    median milliseconds of a one-row ``INSERT`` in autocommit (Django's connection).

    A fact about the machine, for reading the ratio: the library commits a batch at a time
    and the hand-written loop every reminder, so the ratio grows with what a commit costs
    (``innodb_flush_log_at_trx_commit = 1`` flushes the redo log at each one).
    """
    from django.db import connection

    names = ", ".join(f"'{name}'" for name in SERVER_VARIABLES)
    times = []
    with connection.cursor() as cursor:
        cursor.execute(f"SHOW SESSION VARIABLES WHERE Variable_name IN ({names})")
        facts: dict[str, Any] = dict(cursor.fetchall())
        cursor.execute(
            "CREATE TABLE IF NOT EXISTS bench_commit_probe (id bigint AUTO_INCREMENT PRIMARY KEY)"
        )
        for _ in range(200):
            began = clock()
            cursor.execute("INSERT INTO bench_commit_probe () VALUES ()")
            times.append((clock() - began) * 1000)
        cursor.execute("DROP TABLE bench_commit_probe")
    older = facts.pop("tx_isolation", None)
    facts["isolation"] = facts.pop("transaction_isolation", older)
    facts["commit_ms"] = round(median(times), 3)
    return facts


def main() -> int:
    """Measure on MariaDB and print the findings (``{"unavailable": why}`` when it cannot)."""
    config = bench_config.from_environment().on_mariadb()
    why = unavailable(config)
    if why is not None:
        progress(f"MariaDB figures not measured: {why}")
        print(json.dumps({"unavailable": why}), flush=True)
        return 0
    ensure_database(config)
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    os.environ["DATABASE_URL"] = config.database_url()  # never a test database
    import django

    django.setup()
    from django.core.management import call_command

    from bench import database

    call_command("migrate", verbosity=0)
    progress(f"MariaDB at {config.mariadb_host}:{config.mariadb_port}, database {config.database}")
    try:
        with tempfile.TemporaryDirectory(prefix="bsft-saga-bench-mariadb-") as tmp:
            measured = measure(config, Path(tmp))
    finally:
        database.reset_saga_tables()
    for key, value in measured.metrics.items():
        progress(f"{key:<44} {value:>12.2f}")
    print(json.dumps({"rounds": measured.rounds, "detail": measured.detail}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
