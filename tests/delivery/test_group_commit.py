"""A commit group is written at once, and row by row when a row of it must be undone.

A pass writes the windows and stamps of the rows it delivered in one transaction with no
savepoint per row (on PostgreSQL the advances of all its sagas are one statement, and the
stamps another). A row taken over meanwhile, or a write that fails, rolls that transaction
back and the group is written again a savepoint per row: each row commits or fails alone.
The step a timer wakes plans against what the claim read of its saga; a saga that moved on
since then loses its version check and is planned again.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from django.db import DatabaseError, connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext

from bsft_saga import publish
from bsft_saga.delivery import commit
from bsft_saga.models import SagaInstance, SagaTimeout, TimeoutOutcome
from bsft_saga.signals import event_published
from bsft_saga.timeouts import drain_due
from tests.testapp.load_events import CountStarted, CountWake
from tests.testapp.load_flows import CountingFlow

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def one_group(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every row of a pass in one commit group, whatever the machine's speed."""
    monkeypatch.setattr(commit, "COMMIT_INTERVAL", 3600.0)


def _counters(n: int) -> list[str]:
    run = uuid.uuid4().hex[:6]
    keys = [f"group-{run}-{i}" for i in range(n)]
    for key in keys:
        publish(CountStarted(key))
    return keys


def _counts(keys: list[str]) -> dict[str, tuple[int, int]]:
    """(step, count) of each counter."""
    sagas = SagaInstance.objects.filter(saga_type=CountingFlow.saga_type, correlation_key__in=keys)
    return {saga.correlation_key: (saga.step_index, saga.state["count"]) for saga in sagas}


def _on_wake(key: str, act: Callable[[], None]) -> Callable[[], None]:
    """Run ``act`` in a plain receiver of the wake-up of counter ``key``; returns the undo."""

    def receiver(sender: type, *, envelope: Any, **kwargs: Any) -> None:
        if isinstance(envelope.event, CountWake) and envelope.event.counter_id == key:
            act()

    event_published.connect(receiver, weak=False, dispatch_uid="tests.group.on_wake")

    def undo() -> None:
        event_published.disconnect(dispatch_uid="tests.group.on_wake")

    return undo


def _savepoints(queries: list[dict[str, Any]]) -> int:
    return sum(1 for query in queries if (query["sql"] or "").startswith("SAVEPOINT"))


def test_a_group_of_rows_in_order_is_written_without_a_savepoint_per_row() -> None:
    keys = _counters(3)

    with CaptureQueriesContext(connection) as captured:
        assert drain_due().fired == 3

    assert _savepoints(captured.captured_queries) == 0
    assert _counts(keys) == dict.fromkeys(keys, (2, 1))


def test_a_row_taken_over_before_its_group_commits_is_undone_alone() -> None:
    first, *others = keys = _counters(3)
    timer = SagaTimeout.objects.get(saga__correlation_key=first)

    def take_over_the_first_row() -> None:
        # Another pass claimed it after this one's lease ran out: its stamp is fenced off.
        SagaTimeout.objects.filter(pk=timer.pk).update(claim_token=uuid.uuid4())

    undo = _on_wake(others[-1], take_over_the_first_row)
    try:
        with CaptureQueriesContext(connection) as captured:
            report = drain_due()
    finally:
        undo()

    # The first row's step was written with the others, then undone with its stamp: the
    # group was written again, a savepoint per row, and the row went to the other pass.
    assert (report.fired, report.unclaimed) == (2, 1)
    assert _savepoints(captured.captured_queries) == 3
    assert _counts(keys) == {first: (1, 0), **dict.fromkeys(others, (2, 1))}
    assert SagaTimeout.objects.get(pk=timer.pk).dispatched_at is None


def test_a_group_whose_write_fails_is_written_again_row_by_row() -> None:
    keys = _counters(3)
    failed: list[str] = []

    def fail_the_first_stamp(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        quote = connection.ops.quote_name
        if not failed and sql.startswith(
            f"UPDATE {quote(SagaTimeout._meta.db_table)} SET {quote('dispatched_at')}"
        ):
            failed.append(sql)
            raise DatabaseError("the first stamp of the group fails")
        return execute(sql, params, many, context)

    with (
        CaptureQueriesContext(connection) as captured,
        connection.execute_wrapper(fail_the_first_stamp),
    ):
        report = drain_due()

    assert failed
    assert (report.fired, report.failed) == (3, 0)
    assert _savepoints(captured.captured_queries) == 3
    assert _counts(keys) == dict.fromkeys(keys, (2, 1))
    fired = SagaTimeout.objects.filter(saga__correlation_key__in=keys, outcome=TimeoutOutcome.FIRED)
    assert fired.count() == 3


def test_a_saga_that_moved_on_after_the_claim_is_planned_again_on_fresh_state() -> None:
    first, second = keys = _counters(2)
    woken: Counter[str] = Counter()

    def moved_on(sender: type, *, envelope: Any, **kwargs: Any) -> None:
        if isinstance(envelope.event, CountWake):
            woken[envelope.event.counter_id] += 1
            if envelope.event.counter_id == first:
                # Another writer moves the second saga on (a requeue does this to it).
                SagaInstance.objects.filter(correlation_key=second).update(version=F("version") + 1)

    event_published.connect(moved_on, weak=False, dispatch_uid="tests.group.moved_on")
    try:
        report = drain_due()
    finally:
        event_published.disconnect(dispatch_uid="tests.group.moved_on")

    # The second timer's step was planned on what the claim had read: it lost its version
    # check at the commit, and was delivered again against the saga as it then was.
    assert report.fired == 2
    assert woken == Counter({first: 1, second: 2})
    assert _counts(keys) == dict.fromkeys(keys, (2, 1))
    assert SagaInstance.objects.get(correlation_key=second).version == 3
