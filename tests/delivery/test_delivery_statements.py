"""What a fired timer and a published start event cost the database: statement and commit
counts, pinned (group commit).

Counts, never times: speed is measured by ``make bench``. A pass pays two commits (the claim,
then its commit group) however many timers it fires within a commit interval; each timer
adds a fixed number of statements. These run as transactional tests, so the counts are what
production sends (inside a test transaction every ``atomic`` would be a savepoint instead).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from bsft_saga import publish
from bsft_saga.delivery import commit
from bsft_saga.models import JournalVia, SagaInstance, SagaJournalEntry
from bsft_saga.timeouts import drain_due
from tests.testapp.dispatch_events import NoticeOpened
from tests.testapp.dispatch_flows import NOTICE_TIMERS, NoticeFlow
from tests.testapp.load_events import CountStarted
from tests.testapp.load_flows import CountingFlow

pytestmark = pytest.mark.django_db(transaction=True)

#: Per fired timer, on PostgreSQL: nothing of its own. The woken step finds its instance in
#: what the claim read (no query), and the group writes the advances of all its sagas with
#: their inbox rows and journal entries in one statement, and all its stamps in another. On
#: SQLite each timer's version-checked update, inbox row, journal entry and stamp; on MariaDB
#: and MySQL those and the timer's own claim UPDATE (the claim is one per row there). No
#: backend needs a savepoint per timer (a group is written at once, and row by row only if a
#: row must be undone), and ending the step's wait cancels nothing (the claim read that no
#: step-scoped timer but the one firing is pending).
STATEMENTS_PER_FIRED_TIMER = {"postgresql": 0, "sqlite": 4, "mysql": 5}
#: Per pass: the claim's transaction (BEGIN, SELECT … FOR UPDATE SKIP LOCKED, the claimed
#: timers' sagas with what their steps' lookups would read, the claim's UPDATE, COMMIT), the
#: group's BEGIN and COMMIT, and on PostgreSQL its two statements. SQLite, which cannot lock
#: rows, reads the ready rows before its transaction, then claims them with a conditional
#: UPDATE and re-reads which it took (then their sagas). MariaDB and MySQL lock the ready
#: rows, read their sagas, and claim each row in an UPDATE of its own (counted per timer).
STATEMENTS_PER_PASS = {"postgresql": 9, "sqlite": 8, "mysql": 6}


def _statements(queries: list[dict[str, Any]], prefix: str) -> int:
    return sum(1 for query in queries if query["sql"].startswith(prefix))


def _start_counters(n: int) -> None:
    run = uuid.uuid4().hex[:6]
    for i in range(n):
        publish(CountStarted(f"stmt-{run}-{i}"))


@pytest.fixture
def one_group(monkeypatch: pytest.MonkeyPatch) -> None:
    """A commit interval no pass here reaches: the counts below are those of one group,
    whatever the machine's speed (on a loaded one, 12 timers could outlast 100 ms)."""
    monkeypatch.setattr(commit, "COMMIT_INTERVAL", 3600.0)


@pytest.mark.parametrize("timers", [3, 12])
@pytest.mark.usefixtures("one_group")
def test_a_pass_fires_its_batch_in_one_commit_with_a_fixed_cost_per_timer(timers: int) -> None:
    _start_counters(timers)

    with CaptureQueriesContext(connection) as captured:
        report = drain_due()

    assert report.fired == timers
    queries = captured.captured_queries
    assert _statements(queries, "COMMIT") == 2  # the claim, then the one group
    per_timer = STATEMENTS_PER_FIRED_TIMER[connection.vendor]
    assert len(queries) == STATEMENTS_PER_PASS[connection.vendor] + per_timer * timers
    assert SagaInstance.objects.filter(saga_type=CountingFlow.saga_type, step_index=2).count() == (
        timers
    )
    # The journal entries came with those statements: one per woken step.
    assert SagaJournalEntry.objects.filter(via=JournalVia.TIMER).count() == timers


def test_a_pass_commits_what_it_fired_once_its_commit_interval_has_passed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(commit, "COMMIT_INTERVAL", 0.0)  # every timer outlasts it
    _start_counters(3)

    with CaptureQueriesContext(connection) as captured:
        assert drain_due().fired == 3

    # The claim, then one group per timer: none waits uncommitted behind another's receivers.
    assert _statements(captured.captured_queries, "COMMIT") == 1 + 3


@pytest.mark.usefixtures("one_group")
def test_two_timers_of_each_saga_due_together_cost_two_commit_groups_not_one_per_saga() -> None:
    run = uuid.uuid4().hex[:6]
    for i in range(5):
        publish(NoticeOpened(f"notice-{run}-{i}"))

    with CaptureQueriesContext(connection) as captured:
        assert drain_due().fired == 10

    # Each saga's second timer waits for its first one's commit; the other sagas' first
    # timers go first meanwhile: the claim, then one group of first timers, one of second.
    assert _statements(captured.captured_queries, "COMMIT") == 1 + 2
    fired = SagaInstance.objects.filter(saga_type=NoticeFlow.saga_type).values_list(
        "state__fired", flat=True
    )
    assert sorted(map(sorted, fired)) == [sorted(NOTICE_TIMERS)] * 5


#: What a new instance writes: the instance, its inbox row, its journal entry and its timer.
#: On PostgreSQL one statement (``WITH … INSERT``) that commits on its own; elsewhere four
#: INSERTs.
NEW_INSTANCE_WRITES = {
    "postgresql": ["WITH"],
    "sqlite": ["BEGIN", "INSERT", "INSERT", "INSERT", "INSERT", "COMMIT"],
    "mysql": ["BEGIN", "INSERT", "INSERT", "INSERT", "INSERT", "COMMIT"],
}


def _first_words(queries: list[dict[str, Any]]) -> list[str]:
    return [query["sql"].split()[0] for query in queries]


def test_publishing_a_start_event_costs_one_read_and_one_commit_without_savepoints() -> None:
    with CaptureQueriesContext(connection) as captured:
        publish(CountStarted("stmt-start"))

    # The lookup of the key's instance (none), then the writes of the new one.
    assert _first_words(captured.captured_queries) == [
        "SELECT",
        *NEW_INSTANCE_WRITES[connection.vendor],
    ]
    saga = SagaInstance.objects.get(correlation_key="stmt-start")
    assert SagaJournalEntry.objects.filter(saga=saga).count() == 1


def test_a_start_event_inside_a_callers_transaction_adds_one_savepoint() -> None:
    with CaptureQueriesContext(connection) as captured, transaction.atomic():
        publish(CountStarted("stmt-nested"))

    writes = [
        word for word in NEW_INSTANCE_WRITES[connection.vendor] if word not in ("BEGIN", "COMMIT")
    ]
    assert _first_words(captured.captured_queries) == [
        "BEGIN",
        "SELECT",
        "SAVEPOINT",
        *writes,
        "RELEASE",
        "COMMIT",
    ]


def test_the_claim_locks_timers_without_joining_their_sagas() -> None:
    # Joined into the locking, limited query, the sagas let the planner read every saga
    # instance (completed ones too) on each claim; found by make soak once ANALYZE had run.
    if not connection.features.has_select_for_update_skip_locked:
        pytest.skip("SQLite claims with a conditional UPDATE, without row locks")
    _start_counters(2)

    with CaptureQueriesContext(connection) as captured:
        drain_due()

    [claim] = [q["sql"] for q in captured.captured_queries if "SKIP LOCKED" in q["sql"]]
    assert "JOIN" not in claim
    assert "bsft_saga_sagainstance" not in claim
