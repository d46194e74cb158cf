"""A stand-in for autovacuum, for servers that run with ``autovacuum = off``.

Production runs autovacuum; a development server may not (``autovacuum`` is a server-wide
setting: neither a database nor a table can turn it back on). Without any VACUUM the
soak's plain phase would pile up dead tuples exactly as the pinned one does, and the
comparison would show nothing. So when the server's autovacuum is off, the soak applies
autovacuum's own rule to the saga tables itself, from its own connection, every
``autovacuum_naptime``, with the server's thresholds (``relation_needs_vacanalyze`` in
PostgreSQL's autovacuum.c):

- VACUUM when ``n_dead_tup > autovacuum_vacuum_threshold + autovacuum_vacuum_scale_factor
  x reltuples``, or when ``n_ins_since_vacuum > autovacuum_vacuum_insert_threshold +
  autovacuum_vacuum_insert_scale_factor x reltuples``;
- ANALYZE when ``n_mod_since_analyze > autovacuum_analyze_threshold +
  autovacuum_analyze_scale_factor x reltuples``;

throttled like an autovacuum worker (``vacuum_cost_delay`` and ``vacuum_cost_limit`` set to
the autovacuum ones for its session). What it cannot imitate: autovacuum's workers run
beside the load rather than between two samples, and cancel themselves when they block a
lock. Every run is recorded (when, which table, dead tuples before and after, how long),
and the results say that the stand-in, not autovacuum, did the vacuuming.
"""

from __future__ import annotations

import time
from typing import Any

from django.db import connection

from bench.sampler import TABLES


def server_autovacuum_is_on() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('autovacuum')::boolean")
        (on,) = cursor.fetchone()
    return bool(on)


class StandIn:
    """Runs autovacuum's rule over the saga tables once every ``autovacuum_naptime``."""

    def __init__(self, started: float) -> None:
        self.settings = _settings()
        self.naptime = self.settings["autovacuum_naptime"]
        self.next_check = started + self.naptime
        self.runs: list[dict[str, Any]] = []

    def check(self, now: float, t_s: float) -> None:
        """Vacuum or analyze what the rule asks for, if a naptime has passed."""
        if now < self.next_check:
            return
        self.next_check = now + self.naptime
        for short, model in TABLES.items():
            table = model._meta.db_table
            stats = _table_counters(table)
            vacuum, analyze = self.needs(stats)
            if vacuum or analyze:
                ran = self.run(table, vacuum, analyze, dead_before=stats["n_dead_tup"])
                self.runs.append({"t_s": round(t_s, 1), "table": short, **ran})

    def needs(self, stats: dict[str, float]) -> tuple[bool, bool]:
        """(VACUUM?, ANALYZE?) for a table with these counters, by autovacuum's rule."""
        s, reltuples = self.settings, max(stats["reltuples"], 0.0)
        vacuum = stats["n_dead_tup"] > (
            s["autovacuum_vacuum_threshold"] + s["autovacuum_vacuum_scale_factor"] * reltuples
        ) or stats["n_ins_since_vacuum"] > (
            s["autovacuum_vacuum_insert_threshold"]
            + s["autovacuum_vacuum_insert_scale_factor"] * reltuples
        )
        analyze = stats["n_mod_since_analyze"] > (
            s["autovacuum_analyze_threshold"] + s["autovacuum_analyze_scale_factor"] * reltuples
        )
        return vacuum, analyze

    def run(self, table: str, vacuum: bool, analyze: bool, *, dead_before: float) -> dict[str, Any]:
        quoted = connection.ops.quote_name(table)
        if vacuum:
            command = f"VACUUM (ANALYZE) {quoted}" if analyze else f"VACUUM {quoted}"
        else:
            command = f"ANALYZE {quoted}"
        began = time.perf_counter()
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('vacuum_cost_delay', %s, false)", [self.delay])
            cursor.execute("SELECT set_config('vacuum_cost_limit', %s, false)", [self.limit])
            cursor.execute(command)
            cursor.execute("RESET vacuum_cost_delay")
            cursor.execute("RESET vacuum_cost_limit")
        return {
            "vacuum": vacuum,
            "analyze": analyze,
            "ms": round((time.perf_counter() - began) * 1000, 1),
            "dead_before": dead_before,
            "dead_after": _table_counters(table)["n_dead_tup"],
        }

    @property
    def delay(self) -> str:
        return f"{self.settings['autovacuum_vacuum_cost_delay']}ms"

    @property
    def limit(self) -> str:
        limit = self.settings["autovacuum_vacuum_cost_limit"]
        return str(int(limit if limit > 0 else self.settings["vacuum_cost_limit"]))


def _settings() -> dict[str, float]:
    """The thresholds as numbers (naptime in seconds, cost delay in ms)."""
    names = (
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
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT name, setting::float FROM pg_settings WHERE name = ANY(%s)", [list(names)]
        )
        found = dict(cursor.fetchall())
    # pg_settings gives each in its base unit: seconds for naptime, ms for the delay.
    return {name: float(found[name]) for name in names}


def _table_counters(table: str) -> dict[str, float]:
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT c.reltuples, s.n_dead_tup, s.n_ins_since_vacuum, s.n_mod_since_analyze
              FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
             WHERE s.relname = %s
            """,
            [table],
        )
        columns = [c.name for c in cursor.description]
        return dict(zip(columns, map(float, cursor.fetchone()), strict=True))
