"""Slow receivers: a dispatcher whose plain receiver of each timer takes 10 ms, and a kill.

The backlog is N invoices whose reminder is due (bench/workloads.py); firing one wakes its
saga (one step, committed with the stamp) and a plain receiver connected in the child
"mails" the customer: it sleeps ``MAIL_MS`` and appends a line to a file
(``bench.child.connect_mailer``). A pass runs receivers with no transaction open and
commits what it delivered at least every 100 ms, so a slow receiver holds no lock and
costs the rate its own time, no more.

**Rate**: one child drains the backlog, timed from the go file to its last pass as in
bench/drain.py; the mail file must then hold one line per invoice. ``BENCH_ROUNDS`` runs,
one after another (nothing to interleave with: the figure has no baseline).

**Kill**: one child drains the same backlog with a short claim lease; once half the mails
are out it gets SIGKILL, wherever it is. A second child waits until the dead one's leases
have run out and drains the rest. Every saga must still have been reminded exactly once
(the steps are exactly once); the mails are at least once, and the figure counts those
that went out again: the receivers of the rows the killed pass had delivered but not yet
committed, about a commit interval's worth (100 ms / 10 ms), plus the one it was in. The
detail also records how many reminders the kill charged a failed attempt (``timers_charged``):
none but the one the killed pass was running, and that one only if it ran alone.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench import database, workloads
from bench.children import Children, child_environment
from bench.config import Config
from bench.drain import MIN_RATE, drain_once
from bench.measure import Measured, progress
from bsft_saga.models import SagaTimeout

MAIL_MS = 10
KILL_LEASE_S = 2  # the killed child's claims run out this long after its last renewal


def run(config: Config, workdir: Path) -> Measured:
    n, rounds = config.sizes.slow_timers, config.sizes.rounds
    rates, runs = [], []
    for number in range(1, rounds + 1):
        mails = _fresh(workdir / f"mails-{number}")
        result = drain_once(
            config, workdir, "drain", 1, n, backlog=workloads.INVOICES, args=_mailing(mails)
        )
        sent = _mails(mails)
        if sorted(sent.values()) != [1] * n:
            raise workloads.WorkloadError(f"{len(sent)} invoices mailed, not each of {n} once")
        rates.append(result["timers_per_s"])
        runs.append(result)
        name = "drain: 10 ms receiver, 1 process"
        progress(f"round {number}/{rounds}  {name:<34} {rates[-1]:>12.2f}")
    killed = kill_once(config, workdir, n)
    progress(f"{'mails sent twice after a SIGKILL':<47} {killed['mails_sent_twice']:>12}")
    progress(f"{'reminders charged an attempt by it':<47} {killed['timers_charged']:>12}")
    database.reset_saga_tables()
    return Measured(
        rounds={
            "drain_timers_per_s_slow_receivers": rates,
            "mails_sent_twice_after_kill": [killed["mails_sent_twice"]],
        },
        detail={"timers_per_run": n, "mail_ms": MAIL_MS, "runs": runs, "kill": killed},
    )


def kill_once(config: Config, workdir: Path, n: int) -> dict[str, Any]:
    """Drain ``n`` invoices, SIGKILL the dispatcher once half of them are mailed, finish
    with a second one; return how many mails went out twice (a mail sent three times
    counts twice), and what the kill left."""
    mails = _fresh(workdir / "mails-kill")
    batch = ["--batch-size", str(config.batch_size)] if config.batch_size else []
    env = {
        **child_environment(config.database_url()),
        "BSFT_SAGA_DELIVERY_JSON": json.dumps({"CLAIM_LEASE": KILL_LEASE_S}),
    }
    with Children(workdir, env) as children:
        first = children.spawn("mailer-killed", "drain", *batch, *_mailing(mails))
        database.reset_saga_tables()
        workloads.write(workloads.INVOICES, n)
        database.vacuum_analyze()
        workloads.check_due(workloads.INVOICES, n)
        children.release([first])
        deadline = time.monotonic() + 60 + n * MAIL_MS / 1000
        while _lines(mails) < n // 2:
            first.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"fewer than {n // 2} mails within the bound")
            time.sleep(0.002)
        first.kill()
        killed_after = _lines(mails)
        held = SagaTimeout.objects.pending().exclude(claim_token=None).count()
        second = children.spawn(
            "mailer-after-kill", "drain", *batch, *_mailing(mails), "--await-leases"
        )
        report = second.report(timeout=60 + KILL_LEASE_S + n / MIN_RATE)
    workloads.check_fired(workloads.INVOICES, n)
    sent = _mails(mails)
    if len(sent) != n:
        raise workloads.WorkloadError(f"{len(sent)} invoices mailed, not {n}")
    return {
        "mails_sent_twice": sum(count - 1 for count in sent.values()),
        "killed_after_mails": killed_after,
        "rows_left_claimed": held,
        "timers_charged": SagaTimeout.objects.filter(attempts__gt=0).count(),
        "second_child": report,
    }


def _fresh(path: Path) -> Path:
    path.unlink(missing_ok=True)
    return path


def _mailing(path: Path) -> tuple[str, ...]:
    return ("--mail-file", str(path), "--mail-ms", str(MAIL_MS))


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def _mails(path: Path) -> Counter[str]:
    """How many mails each timer sent (by message id)."""
    return Counter(line.split()[0] for line in path.read_text().splitlines())
