"""``make soak``: a long, steady run on the local PostgreSQL that shows what drifts over time.

    .venv/bin/python -m bench.soak                          # 2 x 30 minutes (the lead)
    BENCH_SOAK_MINUTES=1 .venv/bin/python -m bench.soak     # about 3 minutes: does it run?

The benchmark (``make bench``) measures one burst on fresh tables; production runs for
weeks on tables that churn. Here the load stays the same for ``BENCH_SOAK_MINUTES`` per
phase, so anything that changes between the first minute and the last is drift: dead
tuples and index bloat the claim has to step over, fire lateness creeping up, a
dispatcher's memory growing.

**The load.** A publisher child publishes ``SoakStarted`` at a fixed ``BENCH_SOAK_RATE``
(40 a second); each start step (``SoakReminderFlow`` of tests/testapp/load_flows.py)
schedules a reminder 2 to 10 s ahead, and the step that reminder wakes completes the saga.
So the pending set stays about ``rate x 6 s`` timers while every table churns. **Two
dispatchers** run the real ``python -m django drain_saga_timeouts --loop`` with
``POLL_INTERVAL`` 1 s (``BSFT_SAGA_DELIVERY_JSON``), stopped with SIGTERM at the end.

**Two phases**, each in a freshly created database, with fresh children:

- ``plain``: nothing else runs in the database;
- ``pinned``: a separate connection opens a ``REPEATABLE READ`` transaction, reads once and
  stays open for the whole phase. Its snapshot pins the xmin horizon, so VACUUM (auto or
  not) may not remove any tuple that died after it began: what a long report query, a
  forgotten ``idle in transaction`` session or a lagging replica with
  ``hot_standby_feedback`` does to a production database.

Every ``BENCH_SOAK_SAMPLE_S`` seconds (10) bench/sampler.py takes a sample. On a server
with ``autovacuum = off`` bench/vacuum.py stands in for it (autovacuum's own rule, every
naptime), and the results say so. After the load
stops, the phase waits until every reminder has fired, stops the dispatchers, and checks
the rows: every saga completed, every timer fired once, two inbox rows a saga, the
dispatchers' totals adding up. A phase that fails a check is reported as a problem, and
the run exits 1 after writing its results.

The soak works in its own database (``bsft_saga_soak``, recreated for each phase and
dropped at the end); it never touches the test databases, ``bsft_saga`` or the bench's. It writes
bench/results/soak.json and the soak section of docs/performance.md (bench/soak_report.py).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg

from bench import database
from bench.children import Child, Children, child_environment
from bench.config import SoakConfig, soak_from_environment
from bench.measure import clock, progress

if TYPE_CHECKING:  # both import the models: at run time only once Django is set up
    from bench.sampler import Sampler
    from bench.vacuum import StandIn

DISPATCHERS = 2
SEED = 11  # the reminders' spread: the same in both phases
READY_TIMEOUT_S = 120
STOP_TIMEOUT_S = 60
DRAIN_OUT_S = 300  # after the load: how long the backlog may take to fire


def main() -> int:
    config = soak_from_environment()
    began = clock()
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    os.environ["DATABASE_URL"] = config.database_url("bsft-soak-sampler")
    os.environ["BSFT_SAGA_DELIVERY_JSON"] = f'{{"POLL_INTERVAL": {config.poll_interval_s}}}'
    import django

    django.setup()
    from django.db import connections

    from bench import report, sampler, soak_report
    from bsft_saga.conf import saga_settings

    fresh_database(config)
    delivery = saga_settings.delivery
    print(
        f"make soak: {config.size}, {config.minutes:g} min a phase at {config.rate:g} events/s, "
        f"database {config.database}",
        file=sys.stderr,
    )
    facts: dict[str, Any] = {
        "machine": {**report.machine_facts(), "load_average_before": _load()},
        "postgresql": {**database.server_facts(), **sampler.settings_facts()},
        "django": django.get_version(),
        "library_settings": {
            "poll_interval_s": delivery.poll_interval.total_seconds(),
            "batch_size": delivery.batch_size,
            "claim_lease_s": delivery.claim_lease.total_seconds(),
        },
    }
    phases = {}
    try:
        with tempfile.TemporaryDirectory(prefix="bsft-saga-soak-") as tmp:
            for number, (name, pinned) in enumerate((("plain", False), ("pinned", True))):
                if number:
                    fresh_database(config)
                phases[name] = run_phase(config, Path(tmp), name, pinned=pinned)
    finally:
        connections.close_all()
        database.drop_database(config, config.database)
    facts["machine"]["load_average_after"] = _load()
    facts["duration_s"] = round(clock() - began, 1)
    document = soak_report.build(config=config, settings=asdict(config), facts=facts, phases=phases)
    soak_report.write(document)
    print(soak_report.summary(document))
    return 1 if any(phase["problems"] for phase in phases.values()) else 0


def fresh_database(config: SoakConfig) -> None:
    """Create the soak database anew and migrate it: every phase starts from the same empty
    tables, with no statistics, no planner estimates and no free space left by the last."""
    from django.core.management import call_command
    from django.db import connections

    connections.close_all()
    database.recreate_database(config, config.database)
    call_command("migrate", verbosity=0)


def run_phase(config: SoakConfig, workdir: Path, name: str, *, pinned: bool) -> dict[str, Any]:
    """One phase: steady load for ``config.minutes``, sampled; then drain out and check."""
    from bench import sampler, vacuum
    from bsft_saga import clock as saga_clock

    pin = pin_horizon(config) if pinned else None
    seconds = config.minutes * 60
    (workdir / name).mkdir()
    try:
        with Children(workdir / name, child_environment(config.database_url())) as children:
            dispatchers = [spawn_dispatcher(config, children, n) for n in range(1, DISPATCHERS + 1)]
            publisher = children.spawn(
                "publisher",
                "publish",
                *("--rate", str(config.rate), "--seconds", str(seconds), "--prefix", name),
                *("--delay-ms", str(config.min_delay_ms), str(config.max_delay_ms)),
                *("--seed", str(SEED)),
            )
            wait_until_connected(dispatchers)
            children.release([publisher], timeout=READY_TIMEOUT_S)
            started, began_at = clock(), saga_clock.now()
            processes = {child.name: child.pid for child in [*dispatchers, publisher]}
            stand_in = None if vacuum.server_autovacuum_is_on() else vacuum.StandIn(started)
            samples = sample_steadily(
                sampler.Sampler(processes, began_at), stand_in, started, seconds, config.sample_s
            )
            published = publisher.report(timeout=STOP_TIMEOUT_S)
            pin_end = close_pin(pin)
            drained = drain_out(config)
            stopped = [parse_totals(d.stop(timeout=STOP_TIMEOUT_S)) for d in dispatchers]
    finally:
        if pin is not None and not pin.closed:  # a run that failed: the original error shows
            pin.close()
    totals = {
        "publisher": published,
        "dispatchers": stopped,
        "drain_out_s": drained,
        "lateness": sampler.fire_lateness(began_at - timedelta(days=1), saga_clock.now()),
        "pin": pin_end,
        "vacuumed_by": "autovacuum" if stand_in is None else "stand-in",
        "stand_in_runs": [] if stand_in is None else stand_in.runs,
    }
    problems = check_phase(published, stopped, drained)
    for problem in problems:
        progress(f"{name}: PROBLEM: {problem}")
    return {"pinned": pinned, "samples": samples, "totals": totals, "problems": problems}


def spawn_dispatcher(config: SoakConfig, children: Children, number: int) -> Child:
    """``python -m django drain_saga_timeouts --loop``, with its session named for it."""
    name = f"dispatcher-{number}"
    env = child_environment(config.database_url(f"bsft-soak-{name}"))
    return children.spawn(
        name, "drain_saga_timeouts", "--loop", barrier=False, env=env, module="django"
    )


def wait_until_connected(dispatchers: list[Child]) -> None:
    """Until every dispatcher's session shows in ``pg_stat_activity`` (set up, polling)."""
    from django.db import connection

    expected = {f"bsft-soak-{child.name}" for child in dispatchers}
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT DISTINCT application_name FROM pg_stat_activity "
                "WHERE datname = current_database()"
            )
            if expected <= {row[0] for row in cursor.fetchall()}:
                return
        for child in dispatchers:
            child.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"dispatchers not connected within {READY_TIMEOUT_S}s")
        time.sleep(0.1)


def sample_steadily(
    sampler: Sampler, stand_in: StandIn | None, started: float, seconds: float, every: float
) -> list[dict[str, Any]]:
    """A sample at 0 s and every ``every`` seconds after, until ``seconds`` are up; between
    two, the autovacuum stand-in's check (bench/vacuum.py), where the server needs one."""
    samples: list[dict[str, Any]] = []
    number = 0
    while True:
        t = number * every
        if t > seconds + 1e-6:
            return samples
        time.sleep(max(0.0, started + t - clock()))
        if stand_in is not None:  # first, so that the sample sees what it did
            stand_in.check(clock(), clock() - started)
        sample = sampler.take(clock() - started)
        samples.append(sample)
        late = sample["lateness"]
        progress(
            f"{sample['t_s']:>7.1f} s  fired {late['fired']:>4}  late p50 {late['p50_ms']} "
            f"p99 {late['p99_ms']} ms  claim {sample['claim']['ms']} ms "
            f"({sample['claim']['buffers']} buffers)  dead timers "
            f"{sample['tables']['timer']['n_dead_tup']}  xmin age {sample['xmin_age']}"
        )
        number += 1


def pin_horizon(config: SoakConfig) -> psycopg.Connection[Any]:
    """Open a ``REPEATABLE READ`` transaction that reads once and stays open: its snapshot
    holds the database's xmin horizon where it is until ``close_pin``."""
    conn = psycopg.connect(
        host=config.pg_host,
        port=config.pg_port,
        user=config.pg_user,
        dbname=config.database,
        application_name="bsft-soak-pin",
        connect_timeout=3,
    )
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    conn.execute("SELECT count(*) FROM bsft_saga_sagatimeout").fetchone()
    return conn


def close_pin(pin: psycopg.Connection[Any] | None) -> dict[str, Any] | None:
    """Roll the pinning transaction back; report how old its snapshot had become."""
    if pin is None:
        return None
    (age,) = pin.execute(
        "SELECT age(backend_xmin) FROM pg_stat_activity WHERE pid = pg_backend_pid()"
    ).fetchone() or (None,)
    pin.rollback()
    pin.close()
    return {"xmin_age_at_end": age}


def drain_out(config: SoakConfig) -> float | None:
    """Seconds until no reminder is pending after the load stopped (None: not in time)."""
    from bsft_saga.models import SagaTimeout

    began = clock()
    while clock() - began < DRAIN_OUT_S + config.max_delay_ms / 1000:
        if not SagaTimeout.objects.pending().exists():
            return round(clock() - began, 1)
        time.sleep(0.5)
    return None


def parse_totals(line: str) -> dict[str, int]:
    """The command's last line, ``fired=N missed=N failed=N dead_lettered=N unclaimed=N``."""
    return {key: int(value) for key, value in (pair.split("=") for pair in line.split())}


def check_phase(
    published: dict[str, Any], dispatchers: list[dict[str, int]], drained: float | None
) -> list[str]:
    """What went wrong in a phase, one line each: nothing lost, nothing applied twice."""
    from bsft_saga.models import SagaInboxEntry, SagaInstance, SagaTimeout, TimeoutOutcome
    from tests.testapp.load_flows import SoakReminderFlow

    n = published["published"]
    sagas = SagaInstance.objects.filter(saga_type=SoakReminderFlow.saga_type)
    timers = SagaTimeout.objects.filter(saga__in=sagas)
    found = {
        "sagas": sagas.count(),
        "sagas completed": sagas.filter(is_complete=True).count(),
        "timers": timers.count(),
        "timers fired": timers.filter(outcome=TimeoutOutcome.FIRED).count(),
        "inbox rows": SagaInboxEntry.objects.filter(saga__in=sagas).count(),
        "fired by the dispatchers": sum(d["fired"] for d in dispatchers),
    }
    expected = {
        "sagas": n,
        "sagas completed": n,
        "timers": n,
        "timers fired": n,
        "inbox rows": 2 * n,
        "fired by the dispatchers": n,
    }
    problems = [
        f"{key}: {found[key]}, expected {expected[key]}"
        for key in expected
        if found[key] != expected[key]
    ]
    if published["failed"]:
        problems.append(f"{published['failed']} start events could not be published")
    for number, totals in enumerate(dispatchers, 1):
        if totals["failed"] or totals["dead_lettered"] or totals["missed"]:
            problems.append(f"dispatcher-{number}: {totals}")
    if drained is None:
        problems.append(f"reminders still pending {DRAIN_OUT_S} s after the load stopped")
    return problems


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


if __name__ == "__main__":
    sys.exit(main())
