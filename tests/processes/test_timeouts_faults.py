"""Dispatchers that die or hang in the middle of a pass, as real child processes.

Each scenario runs ``tests/workers/timer_drain.py`` with a fault point (see its
docstring), checks what the dead or stopped process left behind, then lets another
dispatcher take over and checks that every saga advanced exactly once: ``step_index`` 2,
``version`` 2, its counter at 1, two inbox rows (start and wake-up), its timer ``fired``.

Children run with a one-second ``CLAIM_LEASE``. Leases are measured on the real clock in
the children, so the dispatcher that takes over waits (``--await-leases``, bounded) until
the dead one's lease has passed: about a second of real time per scenario.
"""

from __future__ import annotations

import json
import signal
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db.models import Model

from bsft_saga import publish
from bsft_saga.models import (
    SagaInboxEntry,
    SagaInstance,
    SagaOutboxMessage,
    SagaTimeout,
    TimeoutOutcome,
)
from tests.support.processes import Supervisor, supervised
from tests.support.services import require_server_database
from tests.testapp.load_events import CountStarted, ReminderStarted
from tests.testapp.load_flows import CountingFlow, ReminderFlow

pytestmark = pytest.mark.slow

DRAIN = "timer_drain.py"
SHORT_LEASE = {"BSFT_SAGA_DELIVERY_JSON": json.dumps({"CLAIM_LEASE": 1})}
COUNTERS = 3
KILLED = -signal.SIGKILL


@pytest.fixture
def children(subprocess_env: dict[str, str], tmp_path: Path) -> Iterator[Supervisor]:
    with supervised({**subprocess_env, **SHORT_LEASE}, tmp_path) as supervisor:
        yield supervisor


def _start_counters(n: int = COUNTERS) -> list[str]:
    """Start ``n`` counting sagas whose wake-up timer is due now (on the real clock)."""
    keys = [f"count-{uuid.uuid4().hex[:8]}-{i}" for i in range(n)]
    for key in keys:
        publish(CountStarted(key))
    return keys


def _counters(keys: list[str]) -> dict[str, tuple[Any, ...]]:
    """Per key: (step_index, version, state, inbox rows, timer outcomes)."""
    rows = {}
    for key in keys:
        saga = SagaInstance.objects.get(saga_type=CountingFlow.saga_type, correlation_key=key)
        outcomes = sorted(
            str(outcome) for outcome in saga.timeouts.values_list("outcome", flat=True)
        )
        rows[key] = (
            saga.step_index,
            saga.version,
            saga.state,
            saga.inbox_entries.count(),
            outcomes,
        )
    return rows


def _advanced_once(keys: list[str]) -> dict[str, tuple[Any, ...]]:
    return {key: (2, 2, {"count": 1}, 2, ["fired"]) for key in keys}


def _untouched(keys: list[str]) -> dict[str, tuple[Any, ...]]:
    return {key: (1, 1, {"count": 0}, 1, ["None"]) for key in keys}


def _claimed_pending(keys: list[str]) -> int:
    """How many of the keys' timers are pending and held by a claim."""
    return (
        SagaTimeout.objects.pending()
        .filter(saga__saga_type=CountingFlow.saga_type, saga__correlation_key__in=keys)
        .exclude(claim_token=None)
        .count()
    )


def _take_over(children: Supervisor) -> dict[str, Any]:
    """Run a fresh dispatcher once the dead one's lease has passed; return its report."""
    return children.spawn(DRAIN, "--await-leases", name="successor").report()


def _snapshot() -> dict[str, list[dict[str, Any]]]:
    models: list[type[Model]] = [SagaInstance, SagaTimeout, SagaInboxEntry, SagaOutboxMessage]
    return {
        model.__name__: [dict(row) for row in model._default_manager.order_by("pk").values()]
        for model in models
    }


def test_timers_claimed_by_a_dispatcher_killed_after_claiming_fire_once_after_its_lease(
    children: Supervisor,
) -> None:
    keys = _start_counters()

    killed = children.spawn(DRAIN, "--fault", "kill-after-claim", name="killed")

    assert killed.wait(timeout=60) == KILLED, killed.stderr()
    assert _counters(keys) == _untouched(keys)
    assert _claimed_pending(keys) == COUNTERS
    assert _take_over(children)["fired"] == COUNTERS
    assert _counters(keys) == _advanced_once(keys)


def test_claims_of_a_killed_dispatcher_are_not_taken_over_before_its_lease_passed(
    children: Supervisor,
) -> None:
    keys = _start_counters()
    long_lease = {"BSFT_SAGA_DELIVERY_JSON": json.dumps({"CLAIM_LEASE": 600})}
    killed = children.spawn(DRAIN, "--fault", "kill-after-claim", name="killed", env=long_lease)
    assert killed.wait(timeout=60) == KILLED, killed.stderr()

    report = children.spawn(DRAIN, name="too-early").report()

    assert (report["fired"], report["unclaimed"]) == (0, 0)  # not even seen as due
    assert _claimed_pending(keys) == COUNTERS
    assert _counters(keys) == _untouched(keys)


def test_dispatcher_killed_after_the_woken_step_ran_leaves_nothing_and_its_successor_fires_once(
    children: Supervisor, tmp_path: Path
) -> None:
    keys = _start_counters()
    first, *_rest = keys
    first_message = str(SagaTimeout.objects.get(saga__correlation_key=first).message_id)
    record = tmp_path / "received.txt"

    killed = children.spawn(
        DRAIN, "--fault", "kill-after-publish", "--record", str(record), name="killed"
    )

    assert killed.wait(timeout=60) == KILLED, killed.stderr()
    # The first timer's step ran; its writes waited for a commit that never came.
    assert _counters(keys) == _untouched(keys)
    assert _claimed_pending(keys) == COUNTERS
    report = children.spawn(
        DRAIN, "--await-leases", "--record", str(record), name="successor"
    ).report()
    # The successor fired all three; the first event reached its receivers twice (at least
    # once), the saga's step applied once (exactly once).
    assert report["fired"] == COUNTERS
    received = Counter(line.split()[0] for line in record.read_text().splitlines())
    assert received[first_message] == 2
    assert _counters(keys) == _advanced_once(keys)


def test_dispatcher_killed_in_the_middle_of_its_batch_leaves_nothing_of_the_batch(
    children: Supervisor,
) -> None:
    keys = _start_counters()

    killed = children.spawn(DRAIN, "--fault", "kill-mid-batch", name="killed")

    assert killed.wait(timeout=60) == KILLED, killed.stderr()
    # The first timer's step ran; its writes and stamp waited for a commit that never came.
    assert _counters(keys) == _untouched(keys)
    assert _claimed_pending(keys) == COUNTERS
    assert _take_over(children)["fired"] == COUNTERS
    assert _counters(keys) == _advanced_once(keys)


def test_timer_event_of_no_saga_step_is_redelivered_when_the_dispatcher_died_before_stamping(
    children: Supervisor, tmp_path: Path
) -> None:
    keys = [f"remind-{uuid.uuid4().hex[:8]}-{i}" for i in range(2)]
    for key in keys:
        publish(ReminderStarted(key))
    timers = SagaTimeout.objects.filter(
        saga__saga_type=ReminderFlow.saga_type, saga__correlation_key__in=keys
    ).order_by("due_at", "id")
    first, second = (str(t.message_id) for t in timers)
    record = tmp_path / "received.txt"

    killed = children.spawn(
        DRAIN, "--fault", "kill-after-publish", "--record", str(record), name="killed"
    )

    assert killed.wait(timeout=60) == KILLED, killed.stderr()
    assert [line.split()[0] for line in record.read_text().splitlines()] == [first]
    assert all(t.is_pending for t in timers.all())  # only the dispatcher stamps these
    report = children.spawn(
        DRAIN, "--await-leases", "--record", str(record), name="successor"
    ).report()
    assert report["fired"] == 2
    received = Counter(line.split()[0] for line in record.read_text().splitlines())
    assert received == {first: 2, second: 1}  # at least once: the first one came twice
    assert [t.outcome for t in timers.all()] == [TimeoutOutcome.FIRED] * 2
    sagas = SagaInstance.objects.filter(saga_type=ReminderFlow.saga_type)
    assert sorted(sagas.values_list("step_index", "version")) == [(1, 1), (1, 1)]


def test_dispatcher_killed_inside_the_woken_steps_transaction_leaves_nothing_of_that_step(
    children: Supervisor,
) -> None:
    keys = _start_counters()

    killed = children.spawn(DRAIN, "--fault", "kill-mid-window", name="killed")

    assert killed.wait(timeout=60) == KILLED, killed.stderr()
    assert _counters(keys) == _untouched(keys)  # the step's UPDATE and stamp rolled back
    assert _claimed_pending(keys) == COUNTERS
    assert _take_over(children)["fired"] == COUNTERS
    assert _counters(keys) == _advanced_once(keys)


def test_dispatcher_stopped_after_claiming_and_resumed_after_its_lease_changes_no_row(
    children: Supervisor,
) -> None:
    keys = _start_counters()
    stopped = children.spawn(DRAIN, "--fault", "stop-after-claim", name="stopped")
    stopped.wait_until_stopped(timeout=60)

    assert _take_over(children)["fired"] == COUNTERS
    assert _counters(keys) == _advanced_once(keys)
    before = _snapshot()
    stopped.process.send_signal(signal.SIGCONT)
    report = stopped.report()

    # Every row it had claimed carries the successor's token now: it published nothing.
    assert _snapshot() == before
    assert (report["fired"], report["unclaimed"]) == (0, COUNTERS)


def test_a_pass_stopped_inside_its_commit_holds_no_row_and_writes_nothing_once_resumed(
    children: Supervisor,
) -> None:
    # A database server only: on SQLite the stopped commit holds the database-wide write
    # lock, so no other dispatcher could write until it resumes.
    require_server_database()
    keys = _start_counters()
    stopped = children.spawn(DRAIN, "--fault", "stop-before-window", name="stopped")
    stopped.wait_until_stopped(timeout=60)

    # Stopped before the commit's first row lock (its steps ran with no transaction open):
    # once the lease has run out, the successor fires all three.
    assert _take_over(children)["fired"] == COUNTERS
    stopped.process.send_signal(signal.SIGCONT)
    report = stopped.report()

    # Resumed, its steps lose their version checks and its stamps their claims.
    assert (report["fired"], report["unclaimed"]) == (0, COUNTERS), (report, stopped.stderr())
    assert _counters(keys) == _advanced_once(keys)


def test_a_pass_stopped_halfway_holds_no_row_and_fires_nothing_twice(
    children: Supervisor,
) -> None:
    keys = _start_counters()
    stopped = children.spawn(DRAIN, "--fault", "stop-mid-batch", name="stopped")
    stopped.wait_until_stopped(timeout=60)

    # It ran the first timer's step and keeps its writes for a commit: nothing is locked,
    # nothing written, and the successor fires all three once the lease has run out.
    assert _take_over(children)["fired"] == COUNTERS
    stopped.process.send_signal(signal.SIGCONT)
    report = stopped.report()

    assert (report["fired"], report["unclaimed"]) == (0, COUNTERS)
    assert _counters(keys) == _advanced_once(keys)


def test_a_timer_whose_receiver_kills_every_dispatcher_is_dead_lettered_and_spares_the_rest(
    children: Supervisor,
) -> None:
    keys = _start_counters()
    poison_key = keys[1]
    poison = SagaInstance.objects.get(saga_type=CountingFlow.saga_type, correlation_key=poison_key)
    others = [key for key in keys if key != poison_key]
    limit = {"BSFT_SAGA_DELIVERY_JSON": json.dumps({"CLAIM_LEASE": 1, "MAX_DISPATCH_ATTEMPTS": 3})}

    exits = []
    for n in range(6):  # bounded: without the attempt count this would never end
        child = children.spawn(
            DRAIN,
            "--await-leases",
            "--fault",
            "kill-on-poison",
            "--poison-saga",
            str(poison.pk),
            name=f"dispatcher-{n}",
            env=limit,
        )
        exits.append(child.wait(timeout=60))
        if exits[-1] == 0:
            break

    # The first death took a batch down: nothing said which timer it was running, so none
    # was charged, and each was claimed alone after it. Each later death took down a pass
    # that ran the poisoned timer alone, and claiming it again counted an attempt; the
    # third such death reached MAX_DISPATCH_ATTEMPTS, so the fifth dispatcher gave it up
    # without firing it. Its batch-mates each advanced once, charged nothing.
    assert exits == [KILLED, KILLED, KILLED, KILLED, 0], [c.stderr() for c in children.children]
    assert _counters(others) == _advanced_once(others)
    assert _counters([poison_key]) == {poison_key: (1, 1, {"count": 0}, 1, ["dead_lettered"])}
    timer = SagaTimeout.objects.get(saga=poison)
    assert timer.attempts == 3
    assert timer.last_error.startswith("ClaimAbandoned: ")
    others_timers = SagaTimeout.objects.filter(saga__correlation_key__in=others)
    assert sorted(others_timers.values_list("attempts", flat=True)) == [0, 0]
