"""``manage.py drain_saga_timeouts``: fire due timers and deliver stranded outbox rows."""

from __future__ import annotations

import signal
import threading
from datetime import datetime
from types import FrameType
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from bsft_saga import outbox
from bsft_saga.delivery.heartbeat import reporting
from bsft_saga.draining import RoundReport, Until, drain
from bsft_saga.management import arguments
from bsft_saga.models import DispatcherKind


class Command(BaseCommand):
    help = (
        "Run timer passes over due saga timers, then deliver outbox rows whose delivery "
        "was lost. One pass by default; --until-empty repeats until a pass finds no work; "
        "--loop runs until SIGTERM or Ctrl-C, pausing POLL_INTERVAL after an idle pass. "
        "The output ends with the totals line "
        "'fired=N missed=N failed=N dead_lettered=N unclaimed=N'."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument(
            "--until-empty",
            action="store_true",
            help="Repeat passes until one finds nothing to fire, skip or deliver. A failed "
            "attempt is not work: the row waits for its retry back-off (RETRY_BACKOFF).",
        )
        mode.add_argument(
            "--loop",
            action="store_true",
            help="Poll forever, as a dispatcher process: after a pass that found nothing, wait "
            "BSFT_SAGA['DELIVERY']['POLL_INTERVAL']. SIGTERM stops it after the current "
            "pass, Ctrl-C at once; both print the totals and exit 0. It reports a heartbeat "
            "(a SagaDispatcher row, listed by saga_status), removed when it stops.",
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            default=None,
            metavar="N",
            help="Due timers (and outbox rows) read per pass; default: DELIVERY.BATCH_SIZE, "
            f"at most {arguments.MAX_BATCH_SIZE}.",
        )
        parser.add_argument(
            "--as-of",
            metavar="ISO-DATETIME",
            help="Development only: fire the timers due by this moment instead of now (e.g. "
            "2026-03-31T09:00+02:00; a naive time is in TIME_ZONE). Refused when DEBUG is off, "
            "unless --force. Not with --loop.",
        )
        parser.add_argument(
            "--force",
            action="store_true",
            help="Allow --as-of with DEBUG off: timers fire before their time, for real.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        batch_size = options["batch_size"]
        if batch_size is not None:
            batch_size = arguments.batch_size("--batch-size", batch_size)
        self.verbosity = int(options["verbosity"])
        self.batch_size = batch_size
        self.as_of = _as_of(options["as_of"], force=options["force"], loop=options["loop"])
        self.total = RoundReport()
        self.stop_requested = threading.Event()
        self.rounds = 0
        if options["loop"]:
            # A dispatcher process: its heartbeat shows in saga_status, and its row goes
            # when it stops cleanly (a stale one is then a process that died).
            with reporting(DispatcherKind.LOOP, sign_off=True):
                self._loop()
        else:
            self._drain(Until.EMPTY if options["until_empty"] else Until.ONE_ROUND)
        self._summarise()

    def _drain(self, until: Until) -> None:
        self.until = until
        drain(
            until,
            batch_size=self.batch_size,
            now=self.as_of,
            stop=self.stop_requested,
            on_round=self._report_round,
        )

    def _loop(self) -> None:
        restore = self._install_sigterm_handler()
        try:
            self._drain(Until.STOPPED)
        except KeyboardInterrupt:
            if self.verbosity >= 1:
                self.stderr.write("Interrupted; stopping.")
        finally:
            restore()
        if self.verbosity >= 2:
            self.stdout.write(f"stopped after {self.rounds} passes")

    def _install_sigterm_handler(self) -> Any:
        def on_sigterm(signum: int, frame: FrameType | None) -> None:
            self.stop_requested.set()

        try:
            previous = signal.signal(signal.SIGTERM, on_sigterm)
        except ValueError:  # not the main thread (e.g. call_command from a thread)
            return lambda: None
        return lambda: signal.signal(signal.SIGTERM, previous)

    def _report_round(self, number: int, report: RoundReport | DatabaseError) -> None:
        """Add up a round and print its lines (a round that found no work in ``--loop``
        only at verbosity 3); one that lost the database connection on stderr."""
        self.rounds = number
        if isinstance(report, DatabaseError):
            if self.verbosity >= 1:
                self.stderr.write(self.style.ERROR(f"pass {number} failed: {report!r}"))
            return
        self.total += report
        quiet = self.until is Until.STOPPED and not report.found_work
        if self.until is not Until.ONE_ROUND and self.verbosity >= (3 if quiet else 2):
            self.stdout.write(f"pass {number}: {report.timers}")
            self.stdout.write(f"pass {number}: {_outbox_line(report.outbox)}")

    def _summarise(self) -> None:
        timers, messages = self.total.timers, self.total.outbox
        if self.verbosity >= 2:
            self.stdout.write(_outbox_line(messages))
        if self.verbosity >= 1 and timers.dead_lettered:
            self.stderr.write(
                self.style.WARNING(
                    f"{timers.dead_lettered} timer(s) were dead-lettered; inspect them in "
                    "the admin (status: dead-lettered) and requeue with requeue_saga_timeouts."
                )
            )
        if self.verbosity >= 1 and messages.dead_lettered:
            self.stderr.write(
                self.style.WARNING(
                    f"{messages.dead_lettered} outbox message(s) were dead-lettered; "
                    "requeue them with requeue_saga_outbox once the cause is fixed."
                )
            )
        # Always printed, also at verbosity 0: it is the command's result, and scripts
        # read it as the last line.
        self.stdout.write(self.style.SUCCESS(str(timers)))


def _as_of(value: str | None, *, force: bool, loop: bool) -> datetime | None:
    """The ``--as-of`` moment, aware; ``CommandError`` when it is malformed or not allowed."""
    if value is None:
        return None
    if loop:
        raise CommandError("--as-of cannot be combined with --loop: a dispatcher runs on the clock")
    if not settings.DEBUG and not force:
        raise CommandError(
            "--as-of fires timers before their time; it is meant for development databases "
            "and refused while DEBUG is off. Pass --force to run it anyway."
        )
    return arguments.moment("--as-of", value)


def _outbox_line(report: outbox.DeliveryReport) -> str:
    line = f"outbox: delivered={report.delivered} failed={report.failed}"
    if report.dead_lettered:
        line += f" dead_lettered={report.dead_lettered}"
    return line
