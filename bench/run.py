"""Micro-benchmarks of bsft_saga on the database named by DATABASE_URL. Not run in CI.

    .venv/bin/python bench/run.py [--events N] [--timers N] [--batch-size N] [--dispatchers K]

Measures ``publish()`` of a one-step flow (each event starts and completes an instance)
and ``drain_due()`` of N due timers, each waking the next step of its saga. With
``--dispatchers K`` (K > 1) the timers are drained by K processes running
tests/workers/timer_drain.py at once. Without DATABASE_URL it uses bench/.bench.sqlite3.
The flows are the test app's (tests/testapp/load_flows.py); their rows are deleted before
and after each run, nothing else is touched.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1000, help="events to publish")
    parser.add_argument("--timers", type=int, default=1000, help="due timers to drain")
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--dispatchers", type=int, default=1, help="processes draining")
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    os.environ.setdefault("DATABASE_URL", f"sqlite:///{ROOT / 'bench' / '.bench.sqlite3'}")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    print(f"backend: {connection.vendor} ({connection.settings_dict['NAME']})")
    _clean()
    try:
        rows = [
            ("publish, 1-step flow", args.events, _bench_publish(args.events)),
            (
                f"drain_due, {args.dispatchers} dispatcher(s), batch {args.batch_size}",
                args.timers,
                _bench_drain(args.timers, args.batch_size, args.dispatchers),
            ),
        ]
    finally:
        _clean()
    print(f"{'benchmark':<44} {'n':>7} {'seconds':>9} {'per second':>11}")
    for name, n, seconds in rows:
        print(f"{name:<44} {n:>7} {seconds:>9.2f} {n / seconds:>11.1f}")
    return 0


def _clean() -> None:
    from bsft_saga.models import SagaInstance
    from tests.testapp.load_flows import BenchFlow, CountingFlow

    SagaInstance.objects.filter(
        saga_type__in=[BenchFlow.saga_type, CountingFlow.saga_type]
    ).delete()


def _bench_publish(n: int) -> float:
    from bsft_saga import publish
    from tests.testapp.load_events import BenchPing

    run = uuid.uuid4().hex[:8]
    started = time.perf_counter()
    for i in range(n):
        publish(BenchPing(f"bench-{run}-{i}"))
    return time.perf_counter() - started


def _bench_drain(n: int, batch_size: int, dispatchers: int) -> float:
    from bsft_saga import publish
    from bsft_saga.models import SagaTimeout
    from bsft_saga.timeouts import drain_due
    from tests.testapp.load_events import CountStarted

    run = uuid.uuid4().hex[:8]
    for i in range(n):  # each start step schedules a timer that is due at once
        publish(CountStarted(f"bench-{run}-{i}"))
    started = time.perf_counter()
    if dispatchers > 1:
        script = ROOT / "tests" / "workers" / "timer_drain.py"
        command = [sys.executable, str(script), "--batch-size", str(batch_size)]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        processes = [
            subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
            for _ in range(dispatchers)
        ]
        for process in processes:
            process.wait(timeout=3600)
    else:
        while drain_due(batch_size=batch_size).settled:
            pass
    seconds = time.perf_counter() - started
    left = SagaTimeout.objects.pending().filter(saga__correlation_key__startswith=f"bench-{run}")
    if left.exists():
        print(f"warning: {left.count()} timers still pending", file=sys.stderr)
    return seconds


if __name__ == "__main__":
    sys.exit(main())
