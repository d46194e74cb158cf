"""What one ``make bench`` (or ``make soak``) run measures, and how big: read from the
environment once.

The defaults are the full sizes the targets are set for (workload W: 10,000 due reminders;
the poll with 10k and 1M pending rows; RSS after 10k and 100k timers). ``BENCH_SIZE=smoke``
switches every default to a size that runs end to end in about a minute; each ``BENCH_*``
variable still overrides its own value. A run below any full size is labelled
``"size": "smoke"`` in its results, whatever set it, so that its numbers are never read as
a measurement.

``SoakConfig`` is ``make soak``'s: minutes of steady load per phase and the publishing rate
(in full, 30 minutes at 40 start events a second); a run with less of either is labelled
``"size": "short"`` the same way.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from typing import TypeVar

MIN_ROUNDS = 3


@dataclass(frozen=True)
class Sizes:
    rounds: int  # interleaved rounds of every A/B pair; each reported figure is a median
    events: int  # start events published per step run (PostgreSQL)
    sqlite_events: int  # start events published per step run on the SQLite file
    timers: int  # due reminders per drain run (workload W)
    poll_small: int  # pending timer rows in the poll's small table
    poll_large: int  # ... and in its large one
    poll_reps: int  # claims timed per poll table per round
    rss_small: int  # due reminders the first RSS dispatcher drains
    rss_large: int  # ... and the second
    slow_timers: int  # due invoice reminders per slow-receiver run (a 10 ms "mail" each)
    web_requests: int  # requests per web run (bench/web.py), sent by 16 clients at once


FULL = Sizes(
    rounds=3,
    events=2_000,
    sqlite_events=2_000,
    timers=10_000,
    poll_small=10_000,
    poll_large=1_000_000,
    poll_reps=200,
    rss_small=10_000,
    rss_large=100_000,
    slow_timers=1_250,
    web_requests=4_000,
)

SMOKE = Sizes(
    rounds=3,
    events=150,
    sqlite_events=150,
    timers=300,
    poll_small=2_000,
    poll_large=20_000,
    poll_reps=30,
    rss_small=300,
    rss_large=1_500,
    slow_timers=250,
    web_requests=320,
)


@dataclass(frozen=True)
class Config:
    sizes: Sizes
    batch_size: int | None  # drain_due(batch_size=...); None: the library's BATCH_SIZE
    pg_host: str
    pg_port: int
    pg_user: str
    database: str  # the bench's own database; its saga tables are truncated freely
    mariadb_host: str  # the MariaDB server of bench/mariadb.py (the same database name)
    mariadb_port: int
    mariadb_user: str  # with no password
    server: str = "postgresql"  # the server database_url() names: "postgresql" or "mariadb"

    @property
    def size(self) -> str:
        """``"full"`` when every size is at least the full one, else ``"smoke"``."""
        full = asdict(FULL)
        return "full" if all(v >= full[k] for k, v in asdict(self.sizes).items()) else "smoke"

    def database_url(self, name: str | None = None) -> str:
        """The URL of the bench's database (or ``name``) on ``server``."""
        name = name or self.database
        if self.server == "mariadb":
            return f"mysql://{self.mariadb_user}@{self.mariadb_host}:{self.mariadb_port}/{name}"
        return f"postgres://{self.pg_user}@{self.pg_host}:{self.pg_port}/{name}"

    def on_mariadb(self) -> Config:
        """This configuration with ``database_url()`` on the MariaDB server."""
        return replace(self, server="mariadb")


def from_environment(environ: dict[str, str] | None = None) -> Config:
    """Read ``BENCH_*`` (see bench/README.md); a bad value is a ``SystemExit`` naming it."""
    env = os.environ if environ is None else environ
    preset = env.get("BENCH_SIZE", "full")
    if preset not in ("full", "smoke"):
        raise SystemExit(f"BENCH_SIZE must be 'full' or 'smoke', not {preset!r}")
    defaults = FULL if preset == "full" else SMOKE
    values = {
        f.name: _positive(env, f"BENCH_{f.name.upper()}", getattr(defaults, f.name))
        for f in fields(Sizes)
    }
    sizes = Sizes(**values)
    if sizes.rounds < MIN_ROUNDS:
        raise SystemExit(f"BENCH_ROUNDS must be at least {MIN_ROUNDS}: ratios are medians")
    database = env.get("BENCH_DATABASE", "bsft_saga_bench")
    if not database.startswith("bsft_saga_bench"):
        # The bench truncates and drops what it uses: never let it near another database.
        raise SystemExit("BENCH_DATABASE must start with 'bsft_saga_bench'")
    batch = env.get("BENCH_BATCH_SIZE")
    return Config(
        sizes=sizes,
        batch_size=_positive(env, "BENCH_BATCH_SIZE", 1) if batch else None,
        pg_host=env.get("BENCH_PG_HOST", "127.0.0.1"),
        pg_port=_positive(env, "BENCH_PG_PORT", 5432),
        pg_user=env.get("BENCH_PG_USER", "postgres"),
        database=database,
        mariadb_host=env.get("BENCH_MARIADB_HOST", "127.0.0.1"),
        mariadb_port=_positive(env, "BENCH_MARIADB_PORT", 3306),
        mariadb_user=env.get("BENCH_MARIADB_USER", "root"),
    )


Environment = dict[str, str] | os._Environ[str]
Number = TypeVar("Number", int, float)


def _positive(env: Environment, name: str, default: int) -> int:
    return _positive_number(env, name, default, int, "integer")


def _positive_float(env: Environment, name: str, default: float) -> float:
    return _positive_number(env, name, default, float, "number")


def _positive_number(
    env: Environment, name: str, default: Number, parse: Callable[[str], Number], kind: str
) -> Number:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = parse(raw.replace("_", ""))
    except ValueError:
        raise SystemExit(f"{name} must be a positive {kind}, not {raw!r}") from None
    if not value > 0:
        raise SystemExit(f"{name} must be a positive {kind}, not {raw!r}")
    return value


# -- make soak --------------------------------------------------------------------------------

SOAK_FULL_MINUTES = 30.0  # per phase
SOAK_FULL_RATE = 40.0  # start events a second


@dataclass(frozen=True)
class SoakConfig:
    """What one ``make soak`` run does (bench/soak.py); see bench/README.md."""

    minutes: float  # steady load per phase
    rate: float  # start events a second, published at a fixed pace
    sample_s: float  # seconds between two samples
    min_delay_ms: int  # each start step schedules its reminder this far ahead, or more,
    max_delay_ms: int  # ... up to this (uniformly spread, one seeded generator per phase)
    poll_interval_s: float  # the dispatchers' POLL_INTERVAL
    pg_host: str
    pg_port: int
    pg_user: str
    database: str  # the soak's own database: created for the run, dropped after it

    @property
    def size(self) -> str:
        """``"full"`` for at least 30 minutes a phase at 40 events a second, else ``"short"``."""
        full = self.minutes >= SOAK_FULL_MINUTES and self.rate >= SOAK_FULL_RATE
        return "full" if full else "short"

    def database_url(self, application_name: str | None = None) -> str:
        """The soak database's URL; ``application_name`` names the session in
        ``pg_stat_activity`` (django-environ passes it on as a connection option)."""
        url = f"postgres://{self.pg_user}@{self.pg_host}:{self.pg_port}/{self.database}"
        return f"{url}?application_name={application_name}" if application_name else url


def soak_from_environment(environ: dict[str, str] | None = None) -> SoakConfig:
    """Read ``BENCH_SOAK_*`` and ``BENCH_PG_*``; a bad value is a ``SystemExit`` naming it."""
    env = os.environ if environ is None else environ
    database = env.get("BENCH_SOAK_DATABASE", "bsft_saga_soak")
    if not database.startswith("bsft_saga_soak"):
        # The soak drops the database it used: never let it near another one.
        raise SystemExit("BENCH_SOAK_DATABASE must start with 'bsft_saga_soak'")
    return SoakConfig(
        minutes=_positive_float(env, "BENCH_SOAK_MINUTES", SOAK_FULL_MINUTES),
        rate=_positive_float(env, "BENCH_SOAK_RATE", SOAK_FULL_RATE),
        sample_s=_positive_float(env, "BENCH_SOAK_SAMPLE_S", 10.0),
        min_delay_ms=2_000,
        max_delay_ms=10_000,
        poll_interval_s=_positive_float(env, "BENCH_SOAK_POLL_INTERVAL", 1.0),
        pg_host=env.get("BENCH_PG_HOST", "127.0.0.1"),
        pg_port=_positive(env, "BENCH_PG_PORT", 5432),
        pg_user=env.get("BENCH_PG_USER", "postgres"),
        database=database,
    )
