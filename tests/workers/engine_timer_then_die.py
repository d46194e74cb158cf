"""Child process: drain a due timer whose event wakes its own saga, and die in a receiver.

Usage: ``python -m tests.workers.engine_timer_then_die`` with the parent test's environment
(``subprocess_env``). The parent scheduled ``ReminderFlow``'s ``remind`` timer in the past.
This process connects a plain receiver of ``ReminderDue`` (after the engine's, which
``ready()`` connected) that SIGKILLs the process, then runs one timer pass: the saga's
step handles the timer's event inside the pass's batch transaction, and the process dies
before that transaction commits.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import django


def _die(sender: type, **kwargs: Any) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def main() -> int:
    django.setup()
    from bsft_saga.signals import event_published
    from bsft_saga.timeouts import drain_due
    from tests.testapp.engine_events import ReminderDue

    event_published.connect(_die, sender=ReminderDue, weak=False)
    report = drain_due()
    print(f"drained without dying: {report}", file=sys.stderr)
    return 3


if __name__ == "__main__":
    sys.exit(main())
