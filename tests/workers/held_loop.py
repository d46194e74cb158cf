"""Child process: ``manage.py drain_saga_timeouts --loop`` that hangs in its first pass that
fires a timer.

Run as ``python tests/workers/held_loop.py --held-file PATH`` with the environment of the
``subprocess_env`` fixture. A receiver of the first timer envelope touches ``--held-file``
and blocks until the process is killed: the pass has committed its claim (the rows name this
dispatcher, its heartbeat says how many it holds) and will deliver nothing, like a
dispatcher that hangs, or that is killed mid-pass.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--held-file", type=Path, required=True)
    args = parser.parse_args()
    held: Path = args.held_file

    import django

    django.setup()

    from django.core.management import call_command

    from bsft_saga.signals import event_published

    def hold(sender: type, *, envelope: Any, **kwargs: Any) -> None:
        if envelope.timer is not None:
            held.touch()
            while True:
                time.sleep(1)

    event_published.connect(hold, dispatch_uid="tests.workers.hold", weak=False)
    call_command("drain_saga_timeouts", "--loop", stdout=sys.stdout, stderr=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
