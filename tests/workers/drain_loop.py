"""Child process: ``manage.py drain_saga_timeouts --loop``, pausable at one point of a pass.

Run as ``python tests/workers/drain_loop.py [options]`` with the environment of the
``subprocess_env`` fixture; SIGTERM ends the loop, which prints its totals line last. For
the failover tests (PostgreSQL): the child pauses once at ``--pause-at`` after
``--pause-after`` timers have been stamped fired, writes its database backend's pid to
``--pause-file``, and goes on once ``--resume-file`` exists. The parent terminates that
backend meanwhile (``pg_terminate_backend``; on MariaDB ``KILL CONNECTION``), as a failover or
a restart would.

Pause points:

``claim``
    before the claim's UPDATE, inside the claim's transaction;
``window``
    before the version-checked UPDATE of the woken steps' instances (on PostgreSQL one
    statement for a commit group), inside the group's transaction;
``commit``
    before the COMMIT of a batch that stamped timers fired.

With ``--mail-log``, a plain receiver of each invoice reminder "mails" slowly: it appends
``start <invoice> <pid>`` to the log, sleeps ``--mail-seconds``, then appends
``mail <invoice> <pid>`` (one write per line, flushed to disk), so that the parent can tell
after a SIGKILL which reminders this process finished, and which one it was running.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

POINTS = ("claim", "window", "commit")
CLAIM_SQL = 'UPDATE "bsft_saga_sagatimeout" SET "claim_token"'
STAMP_SQL = 'UPDATE "bsft_saga_sagatimeout" SET "dispatched_at"'
# Contained, not leading: on PostgreSQL the steps' updates are a WITH … statement (a group's
# names its table "AS i").
INSTANCE_UPDATE_SQL = 'UPDATE "bsft_saga_sagainstance" '


class Pause:
    """Counts fired stamps and pauses the process once, at the chosen point."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.point: str | None = args.pause_at
        self.after: int = args.pause_after
        self.pause_file: Path | None = args.pause_file
        self.resume_file: Path | None = args.resume_file
        self.stamped = 0
        self.stamped_since_commit = 0
        self.done = False

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        shape = sql.replace("`", '"')  # MariaDB quotes names with backticks
        if shape.startswith(STAMP_SQL) and "fired" in [str(p) for p in params or ()]:
            # On PostgreSQL one statement stamps a whole group: its last parameter, the ids.
            last = params[-1]
            stamps = len(last) if isinstance(last, list) else 1
            self.stamped += stamps
            self.stamped_since_commit += stamps
        if (self.point == "claim" and shape.startswith(CLAIM_SQL)) or (
            self.point == "window" and INSTANCE_UPDATE_SQL in shape
        ):
            self.maybe_pause(context["connection"])
        return execute(sql, params, many, context)

    def wrap_commit(self, connection: Any) -> None:
        """Pause before a batch's COMMIT (Django calls ``connection.commit()`` for it)."""
        commit = connection.commit

        def paused_commit() -> None:
            if self.point == "commit" and self.stamped_since_commit:
                self.maybe_pause(connection)
            self.stamped_since_commit = 0
            commit()

        connection.commit = paused_commit

    def maybe_pause(self, connection: Any) -> None:
        if self.done or self.stamped < self.after:
            return
        self.done = True
        assert self.pause_file is not None
        assert self.resume_file is not None
        with connection.connection.cursor() as cursor:  # the raw driver: no wrapper recursion
            mysql = connection.vendor == "mysql"
            cursor.execute("SELECT CONNECTION_ID()" if mysql else "SELECT pg_backend_pid()")
            (pid,) = cursor.fetchone()
        self.pause_file.write_text(str(pid))
        deadline = time.monotonic() + 120
        while not self.resume_file.exists():
            if time.monotonic() > deadline:
                print("drain_loop: never resumed", file=sys.stderr)
                sys.exit(3)
            time.sleep(0.01)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--pause-at", choices=POINTS)
    parser.add_argument("--pause-after", type=int, default=0)
    parser.add_argument("--pause-file", type=Path)
    parser.add_argument("--resume-file", type=Path)
    parser.add_argument("--mail-log", type=Path, help="a slow receiver of invoice reminders")
    parser.add_argument("--mail-seconds", type=float, default=0.0)
    args = parser.parse_args()

    import django

    django.setup()

    from django.core.management import call_command
    from django.db import connection

    if args.mail_log:
        _connect_mailer(args.mail_log, args.mail_seconds)
    pause = Pause(args)
    connection.ensure_connection()
    pause.wrap_commit(connection)
    options = ["--loop", "-v", "2"]
    if args.batch_size:
        options += ["--batch-size", str(args.batch_size)]
    with connection.execute_wrapper(pause):
        call_command("drain_saga_timeouts", *options, stdout=sys.stdout, stderr=sys.stderr)
    return 0


def _connect_mailer(log: Path, seconds: float) -> None:
    from bsft_saga.signals import event_published
    from tests.testapp.dispatch_events import InvoiceReminderDue

    def write(line: str) -> None:
        with log.open("a") as f:  # one write per line: whole lines only
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def mail(sender: type, *, envelope: Any, **kwargs: Any) -> None:
        if isinstance(envelope.event, InvoiceReminderDue):
            write(f"start {envelope.event.invoice_id} {os.getpid()}\n")
            time.sleep(seconds)
            write(f"mail {envelope.event.invoice_id} {os.getpid()}\n")

    event_published.connect(mail, weak=False, dispatch_uid="tests.workers.mail")


if __name__ == "__main__":
    sys.exit(main())
