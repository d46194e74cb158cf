"""A ``drain_saga_timeouts --loop`` dispatcher SIGKILLed halfway through a batch of slow mails.

The loop runs in a child (tests/workers/drain_loop.py) whose plain receiver of each invoice
reminder "mails" in 20 ms and logs when it starts and when it has sent each mail. Once a
third of the first batch is mailed, the child gets SIGKILL, wherever it is: the rows of its
batch it never started are still claimed by it, as is the one it was running and those of
its last commit group. A second ``--loop`` dispatcher takes over once the lease has run out.

What the operator relies on: every saga is reminded exactly once; the rows the dead pass
never started are charged nothing (``attempts`` 0), so that a few crashes in a row (an
OOM-killed worker, a crash-looping deploy) never dead-letter healthy timers; and no row is
charged more than once for the one death. Runs on both backends.
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from bsft_saga import publish
from bsft_saga.models import SagaInstance, SagaTimeout
from bsft_saga.querysets import SagaTimeoutQuerySet
from tests.support.processes import Child, supervised
from tests.testapp.dispatch_events import InvoiceSent
from tests.testapp.dispatch_flows import InvoiceFlow

pytestmark = pytest.mark.slow

INVOICES = 60
BATCH = 30
MAIL_SECONDS = 0.02
KILL_AFTER = BATCH // 3  # mails sent by the first dispatcher
LOOP = "drain_loop.py"
ENV = {"BSFT_SAGA_DELIVERY_JSON": json.dumps({"CLAIM_LEASE": 2, "POLL_INTERVAL": 0.2})}


def _log(path: Path) -> list[tuple[str, str, int]]:
    """``(what, invoice, pid)`` per line: ``start`` when a mail began, ``mail`` once sent."""
    if not path.exists():
        return []
    lines = (line.split() for line in path.read_text().splitlines())
    return [(what, key, int(pid)) for what, key, pid in lines]


def _wait_for(condition: object, child: Child, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if child.process.poll() is not None:
            raise AssertionError(f"{child.name} ended early\n{child.stderr()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{child.stderr()}")
        time.sleep(0.005)


def _reminders() -> SagaTimeoutQuerySet:
    return SagaTimeout.objects.filter(saga__saga_type=InvoiceFlow.saga_type)


def _mails_sent(log: Path) -> int:
    return sum(what == "mail" for what, _key, _pid in _log(log))


def test_a_loop_killed_mid_batch_charges_none_of_the_rows_it_never_started(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    run = uuid.uuid4().hex[:6]
    keys = [f"inv-{run}-{i:02d}" for i in range(INVOICES)]
    for key in keys:
        publish(InvoiceSent(key))
    log = tmp_path / "mails.log"
    mailing = ["--batch-size", str(BATCH), "--mail-log", str(log)]
    mailing += ["--mail-seconds", str(MAIL_SECONDS)]

    with supervised({**subprocess_env, **ENV}, tmp_path) as children:
        killed = children.spawn(LOOP, *mailing, name="killed")
        _wait_for(lambda: _mails_sent(log) >= KILL_AFTER, killed, 60, f"{KILL_AFTER} mails")
        killed.process.send_signal(signal.SIGKILL)
        assert killed.wait(timeout=10) == -signal.SIGKILL
        # What the dead pass left claimed, and what it had done with each of those rows.
        held = {
            timer.saga.correlation_key: timer.pk
            for timer in _reminders().pending().exclude(claim_token=None).select_related("saga")
        }
        by_killed = [(what, key) for what, key, pid in _log(log) if pid == killed.pid]
        started = {key for what, key in by_killed if what == "start"}
        finished = {key for what, key in by_killed if what == "mail"}
        never_started = set(held) - started
        running = started - finished  # empty if it died between two rows
        assert len(running) <= 1, running

        successor = children.spawn(LOOP, *mailing, name="successor")
        _wait_for(
            lambda: not _reminders().pending().exists(), successor, 90, "every reminder to fire"
        )
        successor.process.send_signal(signal.SIGTERM)
        assert successor.wait(timeout=60) == 0, successor.stderr()

    # The kill came halfway through a batch: some of its rows had not been started.
    assert never_started, (held, started)
    sagas = SagaInstance.objects.filter(saga_type=InvoiceFlow.saga_type)
    assert Counter(sagas.values_list("state__reminded", flat=True)) == {1: INVOICES}
    assert sorted(sagas.values_list("step_index", flat=True)) == [2] * INVOICES
    attempts = dict(_reminders().values_list("saga__correlation_key", "attempts"))
    assert {key: attempts[key] for key in never_started} == dict.fromkeys(never_started, 0)
    # At most the row it was running may be charged, and only once for the one death.
    charged = {key: n for key, n in attempts.items() if n}
    assert set(charged) <= running, (charged, running)
    assert set(charged.values()) <= {1}
    # Every invoice mailed; twice only those of the last commit group (at least once).
    mails = Counter(key for what, key, _pid in _log(log) if what == "mail")
    assert set(mails) == set(keys)
    assert set(mails.values()) <= {1, 2}
    assert {key for key, n in mails.items() if n == 2} <= started
