"""Child processes of ``make bench`` (started by bench/children.py, never by hand).

``python -m bench.child drain [--batch-size N] [--mail-file M] --ready-file F --go-file G``
    One bsft_saga dispatcher: ``drain_due()`` passes until a pass finds nothing to settle.
    With ``--mail-file``, a plain receiver of the invoice reminders "mails" each one: it
    sleeps ``--mail-ms`` (10) and appends a line to the file. With ``--await-leases``, it
    first waits (untimed) until no live claim is left: the one that takes over from a
    killed dispatcher.
    With ``--traced``, an OpenTelemetry SDK tracer provider is installed first (a batch
    processor handing every span to an exporter that drops it): what tracing costs a drain.
``python -m bench.child handwritten --ready-file F --go-file G``
    The hand-written loop of bench/baselines.py, until no reminder is due.
``python -m bench.child raw [--batch-size N] --ready-file F --go-file G``
    The raw ceiling of bench/baselines.py (``RawBatch``: psycopg 3 on a connection of its
    own, a batch of ``--batch-size``, the library's ``BATCH_SIZE`` by default, per commit),
    until no reminder is due.
``python -m bench.child raw-set [--batch-size N] --ready-file F --go-file G``
    The set-based ceiling of bench/baselines.py (``RawSetDrain``: the same poll and batch,
    a statement per table per batch), until no reminder is due.
``python -m bench.child poll --rows N --due M [--batch-size N]``
    Migrates its (empty) database, writes N pending timers of which M are due, then answers
    ``claim K`` lines on stdin with the milliseconds of K claims (each rolled back).
``python -m bench.child sqlite-step --events N --rounds R``
    Migrates its SQLite file and times R rounds of N published start events.
``python -m bench.child sqlite-drain --timers N --rounds R [--batch-size N]``
    Migrates its SQLite file and times R rounds of ``drain_due()`` passes firing workload W
    of N reminders (written afresh, untimed, before each).
``python -m bench.child publish --rate R --seconds S --prefix P --delay-ms A B --seed N``
    ``make soak``'s publisher: ``SoakStarted`` events at a fixed pace for S seconds.

A dispatcher sets Django up and connects before it touches its ready file, then waits for
the go file: what it reports (``started`` when it saw the go file, ``finished`` after its
last pass, on the system-wide monotonic clock) excludes its start-up. It also reports its
peak RSS and what it fired.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
import uuid
from pathlib import Path
from typing import Any


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "mode",
        choices=(
            "drain",
            "handwritten",
            "raw",
            "raw-set",
            "poll",
            "sqlite-step",
            "sqlite-drain",
            "publish",
        ),
    )
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--ready-file", type=Path)
    parser.add_argument("--go-file", type=Path)
    parser.add_argument("--rows", type=int)
    parser.add_argument("--due", type=int)
    parser.add_argument("--events", type=int)
    parser.add_argument("--timers", type=int)
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--rate", type=float)
    parser.add_argument("--seconds", type=float)
    parser.add_argument("--prefix")
    parser.add_argument("--delay-ms", type=int, nargs=2)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--mail-file", type=Path)
    parser.add_argument("--mail-ms", type=float, default=10.0)
    parser.add_argument("--await-leases", action="store_true")
    parser.add_argument("--traced", action="store_true")
    args = parser.parse_args()

    import django

    django.setup()
    if args.mode in ("drain", "handwritten", "raw", "raw-set"):
        report = dispatch(args)
    elif args.mode == "poll":
        return poll(args)
    elif args.mode == "publish":
        report = publish_steadily(args)
    elif args.mode == "sqlite-drain":
        report = sqlite_drain(args)
    else:
        report = sqlite_step(args)
    print(json.dumps(report), flush=True)
    return 0


def dispatch(args: argparse.Namespace) -> dict[str, Any]:
    from django.db import connection

    from bench.baselines import RawBatch, RawSetDrain, connect, fire_one_by_hand
    from bench.measure import clock
    from bsft_saga import clock as saga_clock
    from bsft_saga.conf import saga_settings
    from bsft_saga.models import SagaTimeout
    from bsft_saga.timeouts.dispatcher import DrainReport, drain_due

    if args.traced:
        install_tracing()
    if args.mail_file:
        connect_mailer(args.mail_file, args.mail_ms / 1000)
    # The same warm-up for all: a connection, and the ORM's first query behind us.
    connection.ensure_connection()
    SagaTimeout.objects.filter(pk=0).exists()
    if args.mode in ("raw", "raw-set"):
        raw = RawBatch.for_models() if args.mode == "raw" else RawSetDrain.for_models()
        raw_connection = connect()
        raw_batch = args.batch_size or saga_settings.delivery.batch_size
    rss_ready = max_rss_kb(), current_rss_kb()
    args.ready_file.touch()
    while not args.go_file.exists():
        time.sleep(0.001)
    while args.await_leases and SagaTimeout.objects.claimed(saga_clock.now()).exists():
        time.sleep(0.05)

    started = clock()
    total, passes = DrainReport(), 0
    if args.mode == "drain":
        while True:
            report = drain_due(batch_size=args.batch_size)
            total, passes = total + report, passes + 1
            if not report.settled:
                break
    elif args.mode in ("raw", "raw-set"):
        while fired := raw.fire_batch(raw_connection, raw_batch):
            total, passes = total + DrainReport(fired=fired), passes + 1
        raw_connection.close()
    else:
        while fire_one_by_hand():
            total, passes = total + DrainReport(fired=1), passes + 1
    finished = clock()
    return {
        "started": started,
        "finished": finished,
        "fired": total.fired,
        "failed": total.failed,
        "missed": total.missed,
        "dead_lettered": total.dead_lettered,
        "passes": passes,
        "max_rss_kb": max_rss_kb(),
        "current_rss_kb": current_rss_kb(),
        "max_rss_kb_when_ready": rss_ready[0],
        "current_rss_kb_when_ready": rss_ready[1],
        "pid": os.getpid(),
    }


def install_tracing() -> None:
    """Install an SDK tracer provider whose spans are processed as an exporting one would
    (batched, in its thread) and then dropped: the spans' cost, not an exporter's."""
    from collections.abc import Sequence

    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class Dropped(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropped()))
    trace.set_tracer_provider(provider)


def connect_mailer(path: Path, seconds: float) -> None:
    """Connect a plain receiver of the invoice reminders that "mails" the customer.

    It takes ``seconds`` (an SMTP round trip), then appends ``<message id> <invoice>`` to
    ``path`` with one ``write()`` on a file opened for appending: a line written is in the
    file even if this process is killed right after, as a mail handed to the server is
    sent. Connected after the engine's receiver, like any receiver of the application.
    """
    from bsft_saga.events.registry import event_type_of
    from bsft_saga.signals import event_published
    from tests.testapp.dispatch_events import InvoiceReminderDue

    mails = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    reminder = event_type_of(InvoiceReminderDue)

    def mail(sender: type, *, envelope: Any, **kwargs: Any) -> None:
        if envelope.event_type == reminder:
            time.sleep(seconds)
            os.write(mails, f"{envelope.message_id} {envelope.event.invoice_id}\n".encode())

    event_published.connect(mail, dispatch_uid="bench.mail", weak=False)


def poll(args: argparse.Namespace) -> int:
    from django.core.management import call_command
    from django.db import transaction

    from bench import database, workloads
    from bsft_saga import clock
    from bsft_saga.conf import saga_settings
    from bsft_saga.delivery.claim import claim
    from bsft_saga.timeouts.channel import TIMERS

    call_command("migrate", verbosity=0)
    database.disable_autovacuum()
    workloads.write_due_reminders(args.rows, not_due_after=args.due)
    workloads.check_due_reminders(args.rows, due=args.due)
    database.vacuum_analyze()
    lease = saga_settings.delivery.claim_lease
    print(json.dumps({"ready": True, "rows": args.rows, "due": args.due}), flush=True)

    for line in sys.stdin:
        command, _, count = line.partition(" ")
        if command != "claim":
            break
        # Each claim rolled back leaves a dead version of every row it stamped (in the
        # table and in its indexes): start every request from the same clean table.
        database.vacuum_timers()
        milliseconds = []
        for _ in range(int(count)):
            with transaction.atomic():
                began = time.perf_counter()
                rows = claim(
                    TIMERS, limit=args.due, token=uuid.uuid4(), now=clock.now(), lease=lease
                ).rows
                milliseconds.append((time.perf_counter() - began) * 1000)
                transaction.set_rollback(True)  # every repetition sees the same rows
            if len(rows) != args.due:
                raise workloads.WorkloadError(f"a claim took {len(rows)} rows, not {args.due}")
        print(json.dumps({"ms": milliseconds}), flush=True)
    return 0


def sqlite_step(args: argparse.Namespace) -> dict[str, Any]:
    from django.core.management import call_command

    from bench import database, workloads
    from bench.measure import clock
    from bsft_saga import publish

    call_command("migrate", verbosity=0)
    rates = []
    for number in range(args.rounds):
        database.reset_saga_tables()
        began = clock()
        for i in range(args.events):
            publish(workloads.start_event(f"sqlite-{number}-{i:07d}"))
        rates.append(args.events / (clock() - began))
        workloads.check_started(args.events)
    database.reset_saga_tables()
    return {"rates": rates}


def sqlite_drain(args: argparse.Namespace) -> dict[str, Any]:
    from django.core.management import call_command

    from bench import database, workloads
    from bench.measure import clock
    from bsft_saga.timeouts.dispatcher import drain_due

    call_command("migrate", verbosity=0)
    rates = []
    for _ in range(args.rounds):
        database.reset_saga_tables()
        workloads.write_anywhere(workloads.REMINDERS, args.timers)
        workloads.check_due(workloads.REMINDERS, args.timers)
        began = clock()
        while drain_due(batch_size=args.batch_size).settled:
            pass
        rates.append(args.timers / (clock() - began))
        workloads.check_fired(workloads.REMINDERS, args.timers)
    database.reset_saga_tables()
    return {"rates": rates}


def publish_steadily(args: argparse.Namespace) -> dict[str, Any]:
    """Publish ``SoakStarted`` events at ``args.rate`` a second for ``args.seconds``.

    Event ``i`` is due at ``go + i / rate`` on the monotonic clock: a slow publish delays
    the next ones but never lowers the rate over the run, and how far the publisher fell
    behind that schedule is reported (``max_behind_s``), so that a rate the machine could
    not hold is visible instead of silently lower. Each reminder is due a uniformly spread
    ``--delay-ms`` later (seeded: both phases of a soak schedule the same spread). A
    publish that raises (the database is unreachable) is logged, counted and skipped: the
    parent checks the rows against ``published``.
    """
    import logging
    import random

    from django.db import connection

    from bench.measure import clock
    from bsft_saga import publish
    from tests.testapp.load_events import SoakStarted

    connection.ensure_connection()
    args.ready_file.touch()
    while not args.go_file.exists():
        time.sleep(0.001)

    rng = random.Random(args.seed)
    low, high = args.delay_ms
    total = round(args.rate * args.seconds)
    published, failed, behind = 0, 0, 0.0
    started = clock()
    for i in range(total):
        wait = started + i / args.rate - clock()
        if wait > 0:
            time.sleep(wait)
        else:
            behind = max(behind, -wait)
        try:
            publish(SoakStarted(f"{args.prefix}-{i:08d}", remind_after_ms=rng.randint(low, high)))
        except Exception:
            logging.getLogger("bench").exception("publishing start event %d failed", i)
            failed += 1
            connection.close_if_unusable_or_obsolete()  # the next publish reconnects
        else:
            published += 1
    seconds = clock() - started
    return {
        "published": published,
        "failed": failed,
        "seconds": seconds,
        "events_per_s": published / seconds if seconds else 0.0,
        "max_behind_s": behind,
        "max_rss_kb": max_rss_kb(),
        "pid": os.getpid(),
    }


def max_rss_kb() -> int:
    """Peak resident set size of this process so far, in KiB (macOS reports bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak // 1024 if sys.platform == "darwin" else peak


def current_rss_kb() -> int | None:
    """Resident set size now, in KiB (Linux; None elsewhere).

    Next to the peak, it shows whether draining grew the process at all: a peak that is
    still the start-up's would hide a slow growth below it.
    """
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") // 1024


if __name__ == "__main__":
    sys.exit(main())
