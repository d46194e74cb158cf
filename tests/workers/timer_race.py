"""Child process: publish, for each key, the start of a race saga and then a bump.

Run as ``python tests/workers/timer_race.py --name a --keys k1,k2 --go-file F`` with the
environment of the ``subprocess_env`` fixture. Two of these, released together, race to
write the same saga's timer of the same name. Exits 0 and prints a JSON line unless
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
    parser.add_argument("--name", required=True)
    parser.add_argument("--keys", required=True, help="comma-separated correlation keys")
    parser.add_argument("--ready-file", type=Path)
    parser.add_argument("--go-file", type=Path)
    parser.add_argument("--max-seconds", type=float, default=60.0)
    args = parser.parse_args()

    import django

    django.setup()

    from bsft_saga import publish
    from tests.testapp.load_events import RaceBump, RaceOpened

    deadline = time.monotonic() + args.max_seconds
    if args.ready_file:
        args.ready_file.touch()
    while args.go_file and not args.go_file.exists():
        if time.monotonic() > deadline:
            print("timer_race: timed out waiting for the go file", file=sys.stderr)
            return 3
        time.sleep(0.005)
    keys = args.keys.split(",")
    for key in keys:
        publish(RaceOpened(key))
        publish(RaceBump(key, by=args.name))
    print(json.dumps({"published": 2 * len(keys)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
