"""Child process: one timer dispatcher, for the multi-process tests.

Run as ``python tests/workers/timer_drain.py [options]`` with the environment of the
``subprocess_env`` fixture. It calls ``drain_due()`` until a pass finds nothing due twice
in a row, then prints its totals as one JSON line on stdout.

The fault points live here, in the child, and nowhere in the library. A pass claims its
batch in one short transaction, then fires the whole batch in a second one:

``kill-after-claim``
    SIGKILL on the first statement of the batch's transaction: the claim is committed,
    nothing is published.
``kill-after-publish``
    SIGKILL in a receiver connected after the engine's, on the first timer envelope: the
    step the timer woke in its own saga has run inside the batch, which never commits.
``kill-mid-window``
    SIGKILL on the INSERT of the inbox row, inside the woken step's window.
``kill-mid-batch``
    SIGKILL in a receiver connected before the engine's, on the second timer envelope: the
    first timer of the batch is stamped and its step applied, all uncommitted.
``stop-after-claim``
    SIGSTOP on the first statement of the batch's transaction (before SQLite's BEGIN, so
    no lock is held): the claim is committed, nothing is published.
``stop-mid-batch``
    SIGSTOP like ``kill-mid-batch``: the first timer's rows stay locked by the open batch.
``stop-before-window``
    SIGSTOP on the woken step's version-checked UPDATE of its instance: the step has run
    on the state it read, its window has not written yet.
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
CLAIM_SQL = 'UPDATE "bsft_saga_sagatimeout" SET "claim_token"'
# The batch's transaction opens with SQLite's BEGIN or, on PostgreSQL (whose BEGIN the
# driver sends unseen), with the savepoint of its first timer.
BATCH_START_SQL = ("BEGIN", "SAVEPOINT")
# Contained, not leading: on PostgreSQL a step's update and inbox row are one WITH statement.
INBOX_INSERT_SQL = 'INSERT INTO "bsft_saga_sagainboxentry"'
INSTANCE_UPDATE_SQL = 'UPDATE "bsft_saga_sagainstance" SET'


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--fault", choices=FAULTS)
    parser.add_argument("--poison-saga", help="kill-on-poison: the saga id whose timer kills")
    parser.add_argument("--record", type=Path, help="append every timer envelope seen here")
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
                print(_summary(total, passes), file=sys.stderr)
                return 2
    print(_summary(total, passes))
    return 0


def _summary(total: Any, passes: int) -> str:
    return json.dumps({**asdict(total), "passes": passes, "pid": os.getpid()})


def _connect_receivers(args: argparse.Namespace) -> None:
    from bsft_saga.engine.receiver import connect_engine, on_event_published
    from bsft_saga.signals import event_published

    if args.fault in ("kill-mid-batch", "stop-mid-batch"):
        # ready() connected the engine first; put the faulting receiver ahead of it.
        event_published.disconnect(on_event_published, dispatch_uid="bsft_saga.engine")
        signal_number = signal.SIGKILL if args.fault == "kill-mid-batch" else signal.SIGSTOP
        event_published.connect(
            _OnSecondTimer(signal_number), dispatch_uid="tests.workers.fault", weak=False
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
    if args.fault == "kill-after-publish":
        event_published.connect(_kill_on_timer, dispatch_uid="tests.workers.kill", weak=False)
    if args.fault == "kill-on-poison":
        poison = args.poison_saga

        def kill_on_poison(sender: type, *, envelope: Any, **kwargs: Any) -> None:
            if envelope.timer is not None and str(envelope.timer.saga_id) == poison:
                os.kill(os.getpid(), signal.SIGKILL)

        event_published.connect(kill_on_poison, dispatch_uid="tests.workers.kill", weak=False)


class _OnSecondTimer:
    """Signal this process on the second timer envelope, before anyone handles it."""

    def __init__(self, signal_number: int) -> None:
        self.signal_number = signal_number
        self.timers = 0

    def __call__(self, sender: type, *, envelope: Any, **kwargs: Any) -> None:
        if envelope.timer is not None:
            self.timers += 1
            if self.timers == 2:
                os.kill(os.getpid(), self.signal_number)


def _kill_on_timer(sender: type, *, envelope: Any, **kwargs: Any) -> None:
    if envelope.timer is not None:
        os.kill(os.getpid(), signal.SIGKILL)


class _FaultingWrapper:
    """A ``connection.execute_wrapper`` that kills or stops this process at a statement."""

    def __init__(self, fault: str | None) -> None:
        self.fault = fault
        self.claimed = False
        self.stopped = False

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if self.fault in ("kill-after-claim", "stop-after-claim"):
            if sql.startswith(CLAIM_SQL):
                self.claimed = True
            elif self.claimed and not self.stopped and sql.startswith(BATCH_START_SQL):
                self.stopped = True
                os.kill(
                    os.getpid(),
                    signal.SIGKILL if self.fault == "kill-after-claim" else signal.SIGSTOP,
                )
        elif self.fault == "kill-mid-window" and INBOX_INSERT_SQL in sql:
            os.kill(os.getpid(), signal.SIGKILL)
        elif self.fault == "stop-before-window" and not self.stopped and INSTANCE_UPDATE_SQL in sql:
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
