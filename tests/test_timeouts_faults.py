"""Dispatchers that die or stall in the middle of a pass, as real child processes.

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
from tests.services import require_postgres_backend
from tests.testapp.load_events import CountStarted, ReminderStarted
from tests.testapp.load_flows import CountingFlow, ReminderFlow
from tests.workers.timer_support import Supervisor, supervised

pytestmark = pytest.mark.slow

DRAIN = "timer_drain.py"
SHORT_LEASE = {"BSFT_SAGA_TIMEOUTS_JSON": json.dumps({"CLAIM_LEASE": 1})}
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
    """Per key: (step_index, version, state, inbox rows, timer outcomes).

    A fired timer whose dispatcher has not confirmed it yet (its lease still set, so a
    later pass re-publishes it to the other receivers) shows as ``"fired, unconfirmed"``.
    """
    rows = {}
    for key in keys:
        saga = SagaInstance.objects.get(saga_type=CountingFlow.saga_type, correlation_key=key)
        outcomes = sorted(
            f"{outcome}, unconfirmed" if outcome and lease is not None else str(outcome)
            for outcome, lease in saga.timeouts.values_list("outcome", "claimed_until")
        )
        rows[key] = (
            saga.step_index,
            saga.version,
            saga.state,
            saga.inbox_entries.count(),
            outcomes,
        )
    return rows


def _advanced_once(keys: list[str], *, outcome: str = "fired") -> dict[str, tuple[Any, ...]]:
    return {key: (2, 2, {"count": 1}, 2, [outcome]) for key in keys}


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
    long_lease = {"BSFT_SAGA_TIMEOUTS_JSON": json.dumps({"CLAIM_LEASE": 600})}
    killed = children.spawn(DRAIN, "--fault", "kill-after-claim", name="killed", env=long_lease)
    assert killed.wait(timeout=60) == KILLED, killed.stderr()

    report = children.spawn(DRAIN, name="too-early").report()

    assert (report["fired"], report["unclaimed"]) == (0, 0)  # not even seen as due
    assert _claimed_pending(keys) == COUNTERS
    assert _counters(keys) == _untouched(keys)


def test_dispatcher_killed_after_the_woken_step_committed_leaves_the_saga_advanced_once(
    children: Supervisor, tmp_path: Path
) -> None:
    keys = _start_counters()
    first, *rest = keys
    first_message = str(SagaTimeout.objects.get(saga__correlation_key=first).message_id)
    record = tmp_path / "received.txt"

    killed = children.spawn(
        DRAIN, "--fault", "kill-after-publish", "--record", str(record), name="killed"
    )

    assert killed.wait(timeout=60) == KILLED, killed.stderr()
    # The first timer's step stamped it in its own commit; nobody confirmed the delivery.
    assert _counters([first]) == _advanced_once([first], outcome="fired, unconfirmed")
    assert _counters(rest) == _untouched(rest)
    report = children.spawn(
        DRAIN, "--await-leases", "--record", str(record), name="successor"
    ).report()
    # The successor fired the other two and re-published the first to its receivers
    # (at least once); the saga's step guard and inbox dropped the repeat (exactly once).
    assert report["fired"] == COUNTERS
    received = Counter(line.split()[0] for line in record.read_text().splitlines())
    assert received[first_message] == 2
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


def test_dispatcher_stopped_before_publishing_and_resumed_after_its_lease_changes_no_row(
    children: Supervisor,
) -> None:
    keys = _start_counters()
    stalled = children.spawn(DRAIN, "--fault", "stop-before-publish", name="stalled")
    stalled.wait_until_stopped(timeout=60)

    assert _take_over(children)["fired"] == COUNTERS
    assert _counters(keys) == _advanced_once(keys)
    before = _snapshot()
    stalled.process.send_signal(signal.SIGCONT)
    report = stalled.report()

    # Its late event met the step guard; nothing else it held still carried its claim.
    assert _snapshot() == before
    assert (report["fired"], report["unclaimed"]) == (0, COUNTERS)


def test_step_resumed_after_its_dispatcher_lost_the_lease_changes_no_row(
    children: Supervisor,
) -> None:
    # PostgreSQL only: on SQLite the stalled step sits inside BEGIN IMMEDIATE, holding the
    # database-wide write lock, so no other dispatcher could write until it resumes.
    require_postgres_backend()
    keys = _start_counters()
    stalled = children.spawn(DRAIN, "--fault", "stop-before-window", name="stalled")
    stalled.wait_until_stopped(timeout=60)

    assert _take_over(children)["fired"] == COUNTERS
    before = _snapshot()
    stalled.process.send_signal(signal.SIGCONT)
    report = stalled.report()

    # The version check refused the stale step, the re-read met the step guard, and
    # nothing else it held still carried its claim.
    assert _snapshot() == before
    assert _counters(keys) == _advanced_once(keys)
    assert (report["fired"], report["unclaimed"]) == (0, COUNTERS)
