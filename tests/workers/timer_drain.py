"""Child process: one timer dispatcher, for the multi-process tests.

Run as ``python tests/workers/timer_drain.py [options]`` with the environment of the
``subprocess_env`` fixture. It calls ``drain_due()`` until a pass finds nothing due twice
in a row, then prints its totals as one JSON line on stdout.

The fault points live here, in the child, and nowhere in the library. A pass claims its
batch in one short transaction, runs each timer's receivers with no transaction open, and
commits what they left to write (the woken steps, the stamps) in groups:

``kill-after-claim``
    SIGKILL in a receiver connected before the engine's, on the first timer envelope: the
    claim is committed, no step has run.
``kill-after-publish``
    SIGKILL in a receiver connected after the engine's, on the first timer envelope: the
    step the timer woke in its own saga has run; its writes wait for a commit that never
    comes.
``kill-mid-window``
    SIGKILL on the INSERT of the inbox row, inside the pass's commit of the woken step.
``kill-mid-batch``
    SIGKILL in a receiver connected before the engine's, on the second timer envelope: the
    first timer's step has run, its writes and stamp wait uncommitted.
``stop-after-claim``
    SIGSTOP like ``kill-after-claim``: no transaction is open, no row locked.
``stop-mid-batch``
    SIGSTOP like ``kill-mid-batch``: no transaction is open, no row locked.
``stop-before-window``
    SIGSTOP on the first version-checked UPDATE of the woken steps' instances (on
    PostgreSQL one statement for the group), inside the pass's commit: the steps have run
    on the state they read, nothing is written yet.
``kill-on-poison``
    SIGKILL in a receiver connected after the engine's, on every timer envelope of the saga
    ``--poison-saga``: a receiver that kills every dispatcher that fires that one timer.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

FAULTS = (
    "kill-after-claim",
    "kill-after-publish",
    "kill-mid-window",
    "kill-mid-batch",
    "stop-after-claim",
    "stop-mid-batch",
    "stop-before-window",
    "kill-on-poison",
)
# Contained, not leading: on PostgreSQL the steps' updates and inbox rows are one WITH
# statement (a group's, or a publisher's), and a group's names its table "AS i".
INBOX_INSERT_SQL = 'INSERT INTO "bsft_saga_sagainboxentry"'
INSTANCE_UPDATE_SQL = 'UPDATE "bsft_saga_sagainstance" '


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--fault", choices=FAULTS)
    parser.add_argument("--poison-saga", help="kill-on-poison: the saga id whose timer kills")
    parser.add_argument("--record", type=Path, help="append every timer envelope seen here")
    parser.add_argument(
        "--count-deliveries",
        action="store_true",
        help="report how many timer envelopes this process published, and how many again",
    )
    parser.add_argument("--ready-file", type=Path, help="touched once Django is set up")
    parser.add_argument("--go-file", type=Path, help="wait for it to exist before draining")
    parser.add_argument(
        "--await-leases", action="store_true", help="first wait until no live claim is left"
    )
    parser.add_argument(
        "--no-sync-commit",
        action="store_true",
        help="PostgreSQL: SET synchronous_commit = off (load tests; no server crash is simulated)",
    )
    parser.add_argument("--max-seconds", type=float, default=120.0)
    args = parser.parse_args()

    import django

    django.setup()

    from django.db import connection

    from bsft_saga.timeouts.dispatcher import DrainReport, drain_due

    deadline = time.monotonic() + args.max_seconds
    if args.no_sync_commit and connection.vendor == "postgresql":
        # Commits stay atomic and visible to other sessions at once; only the wait for the
        # WAL flush (a few ms per commit on a small CI disk) is skipped.
        with connection.cursor() as cursor:
            cursor.execute("SET synchronous_commit = off")
    _connect_receivers(args)
    if args.ready_file:
        args.ready_file.touch()
    if args.go_file:
        _wait_for(args.go_file.exists, deadline, "the go file")
    if args.await_leases:
        _wait_for(_no_live_claim, deadline, "the claim leases to expire")

    total, passes, idle = DrainReport(), 0, 0
    with connection.execute_wrapper(_FaultingWrapper(args.fault)):
        while idle < 2:
            report = drain_due(batch_size=args.batch_size)
            passes += 1
            total += report
            if report.settled:
                idle = 0
            else:
                idle += 1
                time.sleep(0.05)
            if time.monotonic() > deadline:
                print(f"timer_drain: gave up after {args.max_seconds}s", file=sys.stderr)
                print(_summary(total, passes, args.count_deliveries), file=sys.stderr)
                return 2
    print(_summary(total, passes, args.count_deliveries))
    return 0


def _summary(total: Any, passes: int, counted_deliveries: bool) -> str:
    counted = {}
    if counted_deliveries:
        # A timer published more than once by this process was delivered again by its
        # pass: its step's window lost a version race (another pass, or a publisher,
        # advanced the saga first).
        counted = {
            "deliveries": sum(_published.values()),
            "delivered_again": sum(n - 1 for n in _published.values()),
        }
    return json.dumps({**asdict(total), "passes": passes, "pid": os.getpid(), **counted})


#: Timer envelopes published by this process, by message id (``--count-deliveries``).
_published: Counter[str] = Counter()


def _count_delivery(sender: type, *, envelope: Any, **kwargs: Any) -> None:
    if envelope.timer is not None:
        _published[str(envelope.message_id)] += 1


def _connect_receivers(args: argparse.Namespace) -> None:
    from bsft_saga.engine.receiver import connect_engine, on_event_published
    from bsft_saga.signals import event_published

    if args.fault in _AHEAD_OF_THE_ENGINE:
        # ready() connected the engine first; put the faulting receiver ahead of it.
        event_published.disconnect(on_event_published, dispatch_uid="bsft_saga.engine")
        nth, signal_number = _AHEAD_OF_THE_ENGINE[args.fault]
        event_published.connect(
            _OnTimer(nth, signal_number), dispatch_uid="tests.workers.fault", weak=False
        )
        connect_engine()
    if args.record:
        path: Path = args.record

        def record(sender: type, *, envelope: Any, **kwargs: Any) -> None:
            if envelope.timer is not None:
                with path.open("a") as f:
                    f.write(f"{envelope.message_id} {envelope.event_type} {os.getpid()}\n")
                    f.flush()
                    os.fsync(f.fileno())

        event_published.connect(record, dispatch_uid="tests.workers.record", weak=False)
    if args.count_deliveries:
        event_published.connect(_count_delivery, dispatch_uid="tests.workers.count", weak=False)
    if args.fault == "kill-after-publish":
        event_published.connect(_kill_on_timer, dispatch_uid="tests.workers.kill", weak=False)
    if args.fault == "kill-on-poison":
        poison = args.poison_saga

        def kill_on_poison(sender: type, *, envelope: Any, **kwargs: Any) -> None:
            if envelope.timer is not None and str(envelope.timer.saga_id) == poison:
                os.kill(os.getpid(), signal.SIGKILL)

        event_published.connect(kill_on_poison, dispatch_uid="tests.workers.kill", weak=False)


#: Faults raised by a receiver ahead of the engine's: on which timer envelope, which signal.
_AHEAD_OF_THE_ENGINE = {
    "kill-after-claim": (1, signal.SIGKILL),
    "stop-after-claim": (1, signal.SIGSTOP),
    "kill-mid-batch": (2, signal.SIGKILL),
    "stop-mid-batch": (2, signal.SIGSTOP),
}


class _OnTimer:
    """Signal this process on the ``nth`` timer envelope, before anyone handles it."""

    def __init__(self, nth: int, signal_number: int) -> None:
        self.nth = nth
        self.signal_number = signal_number
        self.timers = 0

    def __call__(self, sender: type, *, envelope: Any, **kwargs: Any) -> None:
        if envelope.timer is not None:
            self.timers += 1
            if self.timers == self.nth:
                os.kill(os.getpid(), self.signal_number)


def _kill_on_timer(sender: type, *, envelope: Any, **kwargs: Any) -> None:
    if envelope.timer is not None:
        os.kill(os.getpid(), signal.SIGKILL)


class _FaultingWrapper:
    """A ``connection.execute_wrapper`` that kills or stops this process at a statement."""

    def __init__(self, fault: str | None) -> None:
        self.fault = fault
        self.stopped = False

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        shape = sql.replace("`", '"')  # MariaDB quotes names with backticks
        if self.fault == "kill-mid-window" and INBOX_INSERT_SQL in shape:
            os.kill(os.getpid(), signal.SIGKILL)
        elif (
            self.fault == "stop-before-window" and not self.stopped and INSTANCE_UPDATE_SQL in shape
        ):
            self.stopped = True
            os.kill(os.getpid(), signal.SIGSTOP)
        return execute(sql, params, many, context)


def _no_live_claim() -> bool:
    from bsft_saga import clock
    from bsft_saga.models import SagaTimeout

    return not SagaTimeout.objects.claimed(clock.now()).exists()


def _wait_for(condition: Any, deadline: float, what: str) -> None:
    while not condition():
        if time.monotonic() > deadline:
            print(f"timer_drain: timed out waiting for {what}", file=sys.stderr)
            sys.exit(3)
        time.sleep(0.02)


if __name__ == "__main__":
    sys.exit(main())
