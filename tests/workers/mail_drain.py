"""Child process: a dispatcher whose plain receiver of a reminder "mails" slowly.

Run as ``python tests/workers/mail_drain.py --mail-log FILE [options]`` with the environment
of the ``subprocess_env`` fixture. A receiver of ``InvoiceReminderDue`` sleeps
``--mail-seconds`` (the mail server), then appends the invoice id and whether a transaction
was open to ``--mail-log``, one line per mail. The child drains (``drain_due()``) until no
invoice reminder is pending, or ``--max-seconds`` have passed, and prints its totals as one
JSON line. The parent kills it, or reads the log.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mail-log", type=Path, required=True)
    parser.add_argument("--mail-seconds", type=float, default=0.0)
    parser.add_argument("--max-seconds", type=float, default=120.0)
    args = parser.parse_args()

    import django

    django.setup()

    from django.db import DatabaseError, close_old_connections, connection

    from bsft_saga.models import SagaTimeout
    from bsft_saga.signals import event_published
    from bsft_saga.timeouts.dispatcher import DrainReport, drain_due
    from tests.testapp.dispatch_events import InvoiceReminderDue
    from tests.testapp.dispatch_flows import InvoiceFlow

    def mail(sender: type, *, envelope: Any, **kwargs: Any) -> None:
        if isinstance(envelope.event, InvoiceReminderDue):
            time.sleep(args.mail_seconds)
            line = f"{envelope.event.invoice_id} {int(connection.in_atomic_block)}\n"
            with args.mail_log.open("a") as log:  # one write per mail: whole lines only
                log.write(line)
                log.flush()
                os.fsync(log.fileno())

    event_published.connect(mail, weak=False, dispatch_uid="tests.workers.mail")
    pending = SagaTimeout.objects.pending().filter(saga__saga_type=InvoiceFlow.saga_type)
    deadline = time.monotonic() + args.max_seconds
    total = DrainReport()
    while time.monotonic() < deadline:
        try:
            total += drain_due()
            if not pending.exists():
                break
        except DatabaseError as exc:  # as the --loop command does: reconnect, go on
            print(f"pass lost its connection: {exc}", file=sys.stderr, flush=True)
            close_old_connections()
        time.sleep(0.05)
    print(json.dumps(asdict(total)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
