"""Measure a large purge on PostgreSQL: peak memory of the process, longest transaction.

    .venv/bin/python bench/purge.py [--inbox-rows 1000000] [--inbox-per-instance 10]
                                    [--batch-size 1000] [--database NAME] [--keep-database]

Seeds a database of its own (created on the server of DATABASE_URL, default
postgres://postgres@127.0.0.1:5432, and dropped afterwards) with finished instances
completed 40 days ago, ``--inbox-per-instance`` inbox rows, a fired timer and a delivered
outbox row each (``--inbox-rows`` inbox rows in all), plus live rows that must survive:
active instances with inbox rows, pending timers and pending outbox rows. Then runs
``manage.py purge_saga_data --older-than 30d`` in a child process, and meanwhile

- samples ``pg_stat_activity`` every 10 ms for the age of the child's open transaction:
  a row lock lives no longer than the transaction that took it, so the largest age seen
  bounds the longest lock the purge held (to within one sample);
- runs a live writer beside it (an inbox row inserted and an instance updated, in one
  transaction, every 20 ms) and records its slowest commit.

Reports the child's peak resident memory (``ru_maxrss``), the wall time, both maxima, and
checks that every finished row is gone and every live row is still there. Exits 1 if the
purge used 100 MB or more, held a transaction open for a second or more, or touched a live
row. Not part of the test suite: numbers depend on the machine (run it on a quiet one).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
APPLICATION_NAME = "bsft-saga-purge-bench"
SAGA_TYPE = "bench.purge"
LIVE_INSTANCES = 200
LIVE_EVENT = "bench.live"  # the inbox rows the live writer adds beside the purge
MEMORY_LIMIT_MB = 100
LOCK_LIMIT_SECONDS = 1.0


@dataclass
class Maxima:
    transaction_seconds: float = 0.0
    writer_seconds: float = 0.0
    samples: int = 0
    writes: int = 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inbox-rows", type=int, default=1_000_000)
    parser.add_argument("--inbox-per-instance", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--database", default="bsft_saga_purge_bench")
    parser.add_argument("--keep-database", action="store_true")
    args = parser.parse_args()

    server = urlsplit(os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/x"))
    if server.scheme not in {"postgres", "postgresql"}:
        raise SystemExit("bench/purge.py measures PostgreSQL: DATABASE_URL=postgres://...")
    url = urlunsplit(server._replace(path=f"/{args.database}"))
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PYTHONPATH": str(ROOT),
    }
    os.environ.update(env)
    _create_database(url)
    try:
        return _run(args, env, url)
    finally:
        if not args.keep_database:
            _drop_database(url)


def _run(args: argparse.Namespace, env: dict[str, str], url: str) -> int:
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    instances = args.inbox_rows // args.inbox_per_instance
    started = time.perf_counter()
    live = _seed(instances, args.inbox_per_instance)
    print(
        f"seeded {instances} finished instances, {instances * args.inbox_per_instance} inbox "
        f"rows, {instances} timers, {instances} outbox rows in {time.perf_counter() - started:.0f}s"
    )
    _analyze()

    baseline_mb = _run_child(["check"], env)[2]
    maxima = Maxima()
    stop = threading.Event()
    watchers = [
        threading.Thread(target=_watch_transactions, args=(url, maxima, stop)),
        threading.Thread(target=_live_writer, args=(url, live["writer_saga"], maxima, stop)),
    ]
    for watcher in watchers:
        watcher.start()
    started = time.perf_counter()
    returncode, output, peak_mb = _run_child(
        [
            "purge_saga_data",
            "--older-than",
            "30d",
            "--no-keep-dead-lettered",
            "--batch-size",
            str(args.batch_size),
        ],
        {**env, "PGAPPNAME": APPLICATION_NAME},
    )
    seconds = time.perf_counter() - started
    stop.set()
    for watcher in watchers:
        watcher.join()
    print(output.rstrip())
    print(f"{'purge wall time':<40} {seconds:>10.1f} s")
    print(f"{'peak resident memory of the purge':<40} {peak_mb:>10.1f} MB")
    print(f"{'... of manage.py check, for comparison':<40} {baseline_mb:>10.1f} MB")
    print(
        f"{'longest open transaction of the purge':<40} {maxima.transaction_seconds * 1000:>10.0f}"
        f" ms ({maxima.samples} samples)"
    )
    print(
        f"{'slowest live write beside it':<40} {maxima.writer_seconds * 1000:>10.0f} ms "
        f"({maxima.writes} writes)"
    )
    problems = _verify(live)
    if returncode:
        problems.append(f"purge_saga_data exited with {returncode}")
    if peak_mb >= MEMORY_LIMIT_MB:
        problems.append(f"peak memory {peak_mb:.1f} MB >= {MEMORY_LIMIT_MB} MB")
    if maxima.transaction_seconds >= LOCK_LIMIT_SECONDS:
        problems.append(f"a transaction stayed open {maxima.transaction_seconds:.2f} s")
    for problem in problems:
        print(f"FAIL: {problem}", file=sys.stderr)
    return 1 if problems else 0


def _seed(instances: int, inbox_per_instance: int) -> dict[str, object]:
    """Finished rows in server-side INSERT ... SELECT (no Python memory), live rows by ORM."""
    from django.db import connection

    from bsft_saga.models import SagaInstance, SagaOutboxMessage, SagaTimeout
    from tests.support.retention_rows import outbox_row, saga
    from tests.testapp.ops_flows import make_timer

    instance_table = SagaInstance._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO {instance_table} (id, saga_type, correlation_key, state_type, state,
                step_index, is_complete, created_at, updated_at, completed_at, deadline,
                version, flow_version, terminated_reason)
            SELECT gen_random_uuid(), %s, 'done-' || g, 'bench.State', '{{"n": 1}}'::jsonb,
                2, true, now() - interval '41 days', now() - interval '40 days',
                now() - interval '40 days', NULL, 2, 1, ''
            FROM generate_series(1, %s) g
            """,
            [SAGA_TYPE, instances],
        )
        cursor.execute(
            f"""
            INSERT INTO bsft_saga_sagainboxentry (saga_id, message_id, event_type, handled_at)
            SELECT i.id, gen_random_uuid(), 'bench.event', i.created_at
            FROM {instance_table} i CROSS JOIN generate_series(1, %s)
            WHERE i.saga_type = %s AND i.is_complete
            """,
            [inbox_per_instance, SAGA_TYPE],
        )
        cursor.execute(
            f"""
            INSERT INTO {SagaTimeout._meta.db_table} (saga_id, name, due_at, event_type,
                payload, message_id, calendar_key, correlation_id, scope,
                scheduled_step_index, scheduled_at, attempts, last_error, next_attempt_at,
                dispatched_at, outcome, dead_lettered_at, dead_letter_reason, claim_token,
                claimed_until)
            SELECT id, 'remind', completed_at, 'bench.due', '{{}}'::jsonb, gen_random_uuid(),
                '', '', 'saga', 1, created_at, 0, '', NULL, completed_at, 'fired', NULL, '',
                NULL, NULL
            FROM {instance_table} WHERE saga_type = %s AND is_complete
            """,
            [SAGA_TYPE],
        )
        cursor.execute(
            f"""
            INSERT INTO {SagaOutboxMessage._meta.db_table} (id, saga_id, event_type, payload,
                correlation_id, causation_id, deadline, created_at, delivered_at, attempts,
                last_error, next_attempt_at, dead_lettered_at, claim_token, claimed_until)
            SELECT gen_random_uuid(), id, 'bench.noted', '{{}}'::jsonb, '', NULL, NULL,
                completed_at, completed_at, 0, '', NULL, NULL, NULL, NULL
            FROM {instance_table} WHERE saga_type = %s AND is_complete
            """,
            [SAGA_TYPE],
        )
    from django.utils import timezone

    old = timezone.now() - timedelta(days=400)
    live_sagas = [
        saga(f"live-{n}", started_at=old, events=inbox_per_instance, saga_type=SAGA_TYPE)
        for n in range(LIVE_INSTANCES)
    ]
    for live_saga in live_sagas:
        make_timer(live_saga, "remind", due_at=old)
        outbox_row(live_saga, created_at=old)
    return {
        "writer_saga": str(live_sagas[0].pk),
        "instances": LIVE_INSTANCES,
        "inbox": LIVE_INSTANCES * inbox_per_instance,
    }


def _analyze() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


def _watch_transactions(url: str, maxima: Maxima, stop: threading.Event) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        while not stop.is_set():
            row = conn.execute(
                "SELECT coalesce(max(extract(epoch FROM clock_timestamp() - xact_start)), 0) "
                "FROM pg_stat_activity WHERE application_name = %s AND xact_start IS NOT NULL "
                "AND state <> 'idle'",
                [APPLICATION_NAME],
            ).fetchone()
            assert row is not None  # an aggregate always has a row
            maxima.transaction_seconds = max(maxima.transaction_seconds, float(row[0]))
            maxima.samples += 1
            time.sleep(0.01)


def _live_writer(url: str, saga_id: str, maxima: Maxima, stop: threading.Event) -> None:
    import psycopg

    with psycopg.connect(url) as conn:
        while not stop.is_set():
            started = time.perf_counter()
            with conn.transaction():
                conn.execute(
                    "INSERT INTO bsft_saga_sagainboxentry (saga_id, message_id, event_type, "
                    "handled_at) VALUES (%s, gen_random_uuid(), %s, now())",
                    [saga_id, LIVE_EVENT],
                )
                conn.execute(
                    "UPDATE bsft_saga_sagainstance SET updated_at = now(), version = version + 1 "
                    "WHERE id = %s",
                    [saga_id],
                )
            maxima.writer_seconds = max(maxima.writer_seconds, time.perf_counter() - started)
            maxima.writes += 1
            time.sleep(0.02)


def _verify(live: dict[str, object]) -> list[str]:
    from bsft_saga.models import SagaInboxEntry, SagaInstance, SagaOutboxMessage, SagaTimeout

    problems = []
    left = SagaInstance.objects.filter(saga_type=SAGA_TYPE, is_complete=True).count()
    if left:
        problems.append(f"{left} finished instances are left")
    active = SagaInstance.objects.filter(saga_type=SAGA_TYPE, is_complete=False)
    if active.count() != live["instances"]:
        problems.append(f"{active.count()} of {live['instances']} active instances are left")
    inbox = SagaInboxEntry.objects.filter(saga__in=active).exclude(event_type=LIVE_EVENT).count()
    if inbox != live["inbox"]:
        problems.append(f"{inbox} of {live['inbox']} inbox rows of active instances are left")
    if SagaTimeout.objects.pending().count() != live["instances"]:
        problems.append("a pending timer is gone")
    if SagaOutboxMessage.objects.pending().count() != live["instances"]:
        problems.append("a pending outbox row is gone")
    finished_inbox = SagaInboxEntry.objects.exclude(saga__in=active).count()
    if finished_inbox:
        problems.append(f"{finished_inbox} inbox rows of finished instances are left")
    return problems


def _run_child(command: list[str], env: dict[str, str]) -> tuple[int, str, float]:
    """Run ``python -m django COMMAND``; return its exit status, output and peak RSS in MB."""
    process = subprocess.Popen(
        [sys.executable, "-m", "django", *command],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return process.returncode, output, usage.ru_maxrss / 1024  # kilobytes on Linux


def _maintenance_url(url: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/postgres"))


def _create_database(url: str) -> None:
    import psycopg

    name = urlsplit(url).path.lstrip("/")
    with psycopg.connect(_maintenance_url(url), autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            raise SystemExit(
                f"database {name!r} exists; the benchmark seeds a fresh one and drops it "
                "afterwards: drop it or pass another --database"
            )
        conn.execute(f'CREATE DATABASE "{name}"')


def _drop_database(url: str) -> None:
    import psycopg
    from django.db import connections

    connections.close_all()
    name = urlsplit(url).path.lstrip("/")
    with psycopg.connect(_maintenance_url(url), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')


if __name__ == "__main__":
    sys.exit(main())
