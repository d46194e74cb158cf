"""``make profile``: where the Python time of a fired timer and of a start event goes.

    .venv/bin/python -m bench.profile               # 3,000 reminders, 1,000 start events
    .venv/bin/python -m bench.profile --timers 10000 --events 2000

Runs on the bench's own database (``bsft_saga_bench``, as ``make bench``), in this process:
workload W is written (untimed, bench/workloads.py), then ``drain_due()`` passes fire it
under pyinstrument; then ``publish()`` of N start events (the step benchmark's) under it
too. Writes ``bench/results/profile-drain.html`` and ``profile-step.html`` (flame graphs,
not committed) and prints the heaviest frames of each, with the time per fired timer and
per start event. Profiling slows everything down; read shares, not rates.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from bench import config as bench_config
from bench import database

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timers", type=int, default=3000)
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--interval", type=float, default=0.0002, help="sampling, seconds")
    parser.add_argument("--top", type=int, default=25, help="frames listed per profile")
    args = parser.parse_args()
    try:
        from pyinstrument import Profiler
    except ImportError:
        raise SystemExit(
            "bench.profile needs pyinstrument: .venv/bin/pip install -e '.[dev]'"
        ) from None

    config = bench_config.from_environment()
    database.ensure_database(config, config.database)
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    os.environ["DATABASE_URL"] = config.database_url()
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from bench import workloads
    from bench.measure import clock
    from bsft_saga import publish
    from bsft_saga.timeouts.dispatcher import drain_due

    call_command("migrate", verbosity=0)
    RESULTS.mkdir(exist_ok=True)
    try:
        database.reset_saga_tables()
        workloads.write(workloads.REMINDERS, args.timers)
        database.vacuum_analyze()
        connection.ensure_connection()
        profiler = Profiler(interval=args.interval)
        began = clock()
        with profiler:
            while drain_due().settled:
                pass
        seconds = clock() - began
        workloads.check_fired(workloads.REMINDERS, args.timers)
        _report(profiler, "drain", args.timers, "fired timer", seconds, args.top)

        database.reset_saga_tables()
        profiler = Profiler(interval=args.interval)
        began = clock()
        with profiler:
            for i in range(args.events):
                publish(workloads.start_event(f"profile-{i:07d}"))
        seconds = clock() - began
        workloads.check_started(args.events)
        _report(profiler, "step", args.events, "start event", seconds, args.top)
    finally:
        database.reset_saga_tables()
    return 0


def _report(profiler: object, name: str, n: int, unit: str, seconds: float, top: int) -> None:
    from pyinstrument import Profiler

    assert isinstance(profiler, Profiler)
    path = RESULTS / f"profile-{name}.html"
    path.write_text(profiler.output_html(), encoding="utf-8")
    print(f"\n== {name}: {n} x {unit}, {seconds * 1000 / n:.3f} ms each under the profiler")
    print(f"   flame graph: {path.relative_to(RESULTS.parent.parent)}")
    session = profiler.last_session
    assert session is not None
    print("   own time (callees excluded):")
    for frame, share in _self_times(session, top):
        print(f"   {share:5.1f} %  {frame}")
    print("   bsft_saga functions, callees included:")
    for frame, share in _inclusive_times(session, top, "bsft_saga/"):
        print(f"   {share:5.1f} %  {frame}")


def _self_times(session: object, top: int) -> list[tuple[str, float]]:
    """The frames with the most time of their own (not their callees'), as shares."""
    root = session.root_frame()  # type: ignore[attr-defined]
    total = root.time or 1.0
    own: dict[str, float] = {}
    stack = [root]
    while stack:
        frame = stack.pop()
        stack.extend(frame.children)
        if frame.is_synthetic:
            continue
        where = f"{frame.function} ({_short(frame.file_path)}:{frame.line_no})"
        own[where] = own.get(where, 0.0) + frame.total_self_time
    ranked = sorted(own.items(), key=lambda item: -item[1])[:top]
    return [(where, 100 * t / total) for where, t in ranked]


def _inclusive_times(session: object, top: int, within: str) -> list[tuple[str, float]]:
    """The functions of files under ``within`` with the most time, callees included."""
    root = session.root_frame()  # type: ignore[attr-defined]
    total = root.time or 1.0
    spent: dict[str, float] = {}
    stack = [(root, frozenset[str]())]
    while stack:
        frame, above = stack.pop()
        where = f"{frame.function} ({_short(frame.file_path)}:{frame.line_no})"
        if not frame.is_synthetic and within in (frame.file_path or "") and where not in above:
            spent[where] = spent.get(where, 0.0) + frame.time
            above = above | {where}
        stack.extend((child, above) for child in frame.children)
    ranked = sorted(spent.items(), key=lambda item: -item[1])[:top]
    return [(where, 100 * t / total) for where, t in ranked]


def _short(path: str | None) -> str:
    if not path:
        return "?"
    for marker in ("site-packages/", "/work/main/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


if __name__ == "__main__":
    sys.exit(main())
