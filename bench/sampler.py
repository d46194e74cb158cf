"""One sample of ``make soak``: what drifts while the load stays the same.

Taken every ``BENCH_SOAK_SAMPLE_S`` seconds by the soak's own process, on its own
connection, in autocommit (so that the sampler never holds the xmin horizon back itself):

- **Fire lateness** of the timers fired since the previous sample: ``dispatched_at -
  due_at`` (p50, p99, max, in ms). ``dispatched_at`` is stamped inside the batch's
  transaction, which commits a moment later, so the window ends ``LATENESS_MARGIN`` before
  the sample: a row is counted in exactly one sample once its batch has committed.
- **The claim** (the due-poll): ``bsft_saga.delivery.claim.claim`` for the timer channel,
  exactly as a timer pass runs it, ``CLAIM_PROBES`` times, each in a transaction that is
  rolled back (median ms, from the call to the rollback: the round trips a pass pays
  included); then ``EXPLAIN (ANALYZE, BUFFERS)`` of the SELECT it sent, for the buffers it
  touched, its time on the server and the plan's shape. Every pass pays it, work or none;
  dead index entries that VACUUM has not removed yet (or may not, under a pinned horizon)
  are stepped over by every claim, so this is where bloat shows first.
- **The tables**: per saga table, ``pg_stat_user_tables`` (live and dead tuples, updates and
  HOT updates, (auto)vacuum and (auto)analyze runs) and its heap, index and total size; the
  timer table's indexes one by one.
- **The horizon**: the age (in transactions) of the oldest ``backend_xmin`` in the soak's
  database, which is what VACUUM may not remove dead tuples newer than.
- **Backlog**: due timers not fired yet and the lag of the oldest (``bsft_saga.status``).
- **RSS** of each child (dispatchers, publisher) from ``/proc/<pid>/status`` ``VmRSS``.

A probe claim that finds due rows locks them for its few milliseconds (a dispatcher skips
them until its next pass) and leaves their rolled-back versions as dead tuples: a handful
per sample, next to the hundreds the load writes.
"""

from __future__ import annotations

import json
import statistics
import time
import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from bsft_saga import clock, status
from bsft_saga.conf import saga_settings
from bsft_saga.delivery.claim import claim
from bsft_saga.models import SagaInboxEntry, SagaInstance, SagaTimeout, TimeoutOutcome
from bsft_saga.timeouts.channel import TIMERS

CLAIM_PROBES = 5
LATENESS_MARGIN = timedelta(seconds=2)
# The tables a sample reads, by the short name the results use.
TABLES = {"timer": SagaTimeout, "inbox": SagaInboxEntry, "instance": SagaInstance}


class Sampler:
    """The samples of one phase: ``take()`` every few seconds, from the phase's start."""

    def __init__(self, processes: Mapping[str, int], began: datetime) -> None:
        self.processes = dict(processes)  # name -> pid
        self.since = began  # the lateness window of the next sample starts here
        self.batch_size = saga_settings.delivery.batch_size
        self.lease = saga_settings.delivery.claim_lease

    def take(self, t_s: float) -> dict[str, Any]:
        """One sample, ``t_s`` seconds into the phase."""
        until = clock.now() - LATENESS_MARGIN
        lateness = fire_lateness(self.since, until)
        self.since = max(self.since, until)
        return {
            "t_s": round(t_s, 1),
            "lateness": lateness,
            "claim": self.probe_claim(),
            "due": status.due_timers(),
            "lag_s": round(status.lag_seconds(), 3),
            "tables": table_stats(),
            "timer_indexes_bytes": index_sizes(SagaTimeout),
            "xmin_age": oldest_xmin_age(),
            "rss_mb": {name: rss_mb(pid) for name, pid in self.processes.items()},
        }

    def probe_claim(self) -> dict[str, Any]:
        """Median ms of ``CLAIM_PROBES`` real claims (rolled back), and one EXPLAIN of it.

        A first, untimed claim records the SQL it sends (recording costs time of its own).
        """
        with CaptureQueriesContext(connection) as sent:
            rows = len(self._claim_rolled_back())
        select = next(q["sql"] for q in sent.captured_queries if "FOR UPDATE" in q["sql"])
        milliseconds = []
        for _ in range(CLAIM_PROBES):
            began = time.perf_counter()
            self._claim_rolled_back()
            milliseconds.append((time.perf_counter() - began) * 1000)
        return {"ms": round(statistics.median(milliseconds), 3), "rows": rows, **explain(select)}

    def _claim_rolled_back(self) -> list[SagaTimeout]:
        with transaction.atomic():
            rows = claim(
                TIMERS, limit=self.batch_size, token=uuid.uuid4(), now=clock.now(), lease=self.lease
            ).rows
            transaction.set_rollback(True)
        return rows


def explain(select: str) -> dict[str, Any]:
    """Buffers touched and server-side ms of the claim's SELECT (rolled back: it locks)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {select}")
        (document,) = cursor.fetchone()
        transaction.set_rollback(True)
    (plan,) = json.loads(document) if isinstance(document, str) else document
    top = plan["Plan"]
    return {
        "buffers": top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0),
        "server_ms": round(plan["Execution Time"], 3),
        "plan": plan_shape(top),
    }


def plan_shape(node: dict[str, Any]) -> str:
    """A plan in one line, e.g. ``Limit > LockRows > Nested Loop(Index Scan
    bsft_saga_timeout_ready_idx, Index Scan …)``: a plan that flips shows as a new shape."""
    name = node["Node Type"]
    if "Index Name" in node:
        name += f" {node['Index Name']}"
    elif "Relation Name" in node:
        name += f" {node['Relation Name']}"
    children = [plan_shape(child) for child in node.get("Plans", [])]
    if len(children) == 1:
        return f"{name} > {children[0]}"
    return f"{name}({', '.join(children)})" if children else name


def fire_lateness(since: datetime, until: datetime) -> dict[str, Any]:
    """p50, p99 and max of ``dispatched_at - due_at`` (ms) of the timers fired in
    ``(since, until]``, and how many there were (``None`` for the figures when none)."""
    table = connection.ops.quote_name(SagaTimeout._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT count(*),
                   percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY late),
                   max(late)
              FROM (SELECT extract(epoch FROM dispatched_at - due_at) * 1000 AS late
                      FROM {table}
                     WHERE outcome = %s AND dispatched_at > %s AND dispatched_at <= %s) AS f
            """,
            [TimeoutOutcome.FIRED, since, until],
        )
        count, (p50, p99), late_max = _with_percentiles(cursor.fetchone())
    return {"fired": count, "p50_ms": p50, "p99_ms": p99, "max_ms": late_max}


def _with_percentiles(row: tuple[Any, ...]) -> tuple[int, tuple[Any, Any], Any]:
    count, percentiles, late_max = row
    if not count:
        return 0, (None, None), None
    p50, p99 = (round(float(v), 1) for v in percentiles)
    return count, (p50, p99), round(float(late_max), 1)


def table_stats() -> dict[str, dict[str, Any]]:
    """``pg_stat_user_tables`` and the sizes of every table in ``TABLES``."""
    names = {model._meta.db_table: short for short, model in TABLES.items()}
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT relname, n_live_tup, n_dead_tup, n_tup_ins, n_tup_upd, n_tup_hot_upd,
                   n_tup_del, vacuum_count, autovacuum_count, analyze_count, autoanalyze_count,
                   pg_relation_size(relid) AS heap_bytes, pg_indexes_size(relid) AS index_bytes,
                   pg_total_relation_size(relid) AS total_bytes
              FROM pg_stat_user_tables
             WHERE relname = ANY(%s)
            """,
            [list(names)],
        )
        columns = [c.name for c in cursor.description][1:]
        return {names[row[0]]: dict(zip(columns, row[1:], strict=True)) for row in cursor}


def index_sizes(model: Any) -> dict[str, int]:
    """Bytes of each index of ``model``'s table, by index name."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT indexrelname, pg_relation_size(indexrelid)
              FROM pg_stat_user_indexes WHERE relname = %s ORDER BY indexrelname
            """,
            [model._meta.db_table],
        )
        return dict(cursor.fetchall())


def oldest_xmin_age() -> int | None:
    """Age in transactions of the oldest snapshot held in this database (None: none)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT max(age(backend_xmin)) FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid()
            """
        )
        (age,) = cursor.fetchone()
    return age


def rss_mb(pid: int) -> float | None:
    """``VmRSS`` of process ``pid`` in MB (None: it has exited, or not Linux)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 2)
    except (OSError, ValueError):
        pass
    return None


def settings_facts() -> dict[str, Any]:
    """The autovacuum settings and the saga tables' storage options (fillfactor, per-table
    autovacuum overrides): what decides how fast dead tuples are removed."""
    from bench.database import server_facts

    facts: dict[str, Any] = server_facts(AUTOVACUUM_SETTINGS)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, reloptions FROM pg_class WHERE relname = ANY(%s)",
            [[model._meta.db_table for model in TABLES.values()]],
        )
        facts["reloptions"] = {name: options or [] for name, options in cursor.fetchall()}
    return facts


AUTOVACUUM_SETTINGS = (
    "autovacuum",
    "autovacuum_naptime",
    "autovacuum_vacuum_threshold",
    "autovacuum_vacuum_scale_factor",
    "autovacuum_vacuum_insert_threshold",
    "autovacuum_vacuum_insert_scale_factor",
    "autovacuum_analyze_threshold",
    "autovacuum_analyze_scale_factor",
    "autovacuum_vacuum_cost_delay",
    "autovacuum_vacuum_cost_limit",
    "vacuum_cost_limit",
    "old_snapshot_threshold",
    "idle_in_transaction_session_timeout",
)
