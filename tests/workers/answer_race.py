"""Child process: answer questions while the dispatchers fire their expiry timers.

Run as ``python tests/workers/answer_race.py --keys-file F --when-claimed PK [options]``
with the environment of the ``subprocess_env`` fixture. Released by the go file, it waits
until the timer ``PK`` is claimed (the first expiry in claim order: the dispatchers have
reached the expiries), then publishes ``QuestionAnswered(key)`` for every key of the file,
in its order, as fast as it can, and prints a JSON line. Each answer's window locks its
saga, then the saga's timers (ending the wait cancels the expiry), while a pass may be
firing that expiry: the race of a reply against its deadline. Exits non-zero if
``publish`` raised.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keys-file", type=Path, required=True, help="one key a line")
    parser.add_argument("--when-claimed", type=int, required=True, help="a timer's pk")
    parser.add_argument("--ready-file", type=Path)
    parser.add_argument("--go-file", type=Path)
    parser.add_argument("--max-seconds", type=float, default=120.0)
    args = parser.parse_args()

    import django

    django.setup()

    from bsft_saga import publish
    from bsft_saga.models import SagaTimeout
    from tests.testapp.dispatch_events import QuestionAnswered

    keys = args.keys_file.read_text().split()
    deadline = time.monotonic() + args.max_seconds
    if args.ready_file:
        args.ready_file.touch()
    claimed = SagaTimeout.objects.filter(pk=args.when_claimed).exclude(claim_token=None)
    waited = 0
    while (args.go_file and not args.go_file.exists()) or not claimed.exists():
        if time.monotonic() > deadline:
            print("answer_race: timed out waiting for the expiries' claim", file=sys.stderr)
            return 3
        waited += 1
        time.sleep(0.002)
    began = time.monotonic()
    for key in keys:
        publish(QuestionAnswered(key))
    seconds = time.monotonic() - began
    print(json.dumps({"published": len(keys), "seconds": seconds, "polls": waited}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
