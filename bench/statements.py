"""Statements and transactions per unit of work, counted once before the timed runs.

Not a result key but the context for reading them: what a published start event and a
fired timer cost in round trips and commits, for the library and for the hand-written
baselines, on the commit being measured. Counted in this process on a small workload
(untimed; counting slows each statement, so nothing timed runs under it).

A *transaction* is a commit Django makes (the end of an outermost ``atomic()``) or a
statement sent outside any ``atomic()``, which the driver's autocommit makes a transaction
of its own.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

from django.db import connection

from bench import baselines, database, workloads
from bsft_saga import publish
from bsft_saga.timeouts.dispatcher import drain_due

EVENTS = 20


class StatementLog:
    """An ``execute_wrapper`` counting statements by their first word."""

    def __init__(self) -> None:
        self.kinds: Counter[str] = Counter()
        self.autocommitted = 0
        self.commits = 0

    def __call__(
        self,
        execute: Callable[..., Any],
        sql: str,
        params: Any,
        many: bool,
        context: dict[str, Any],
    ) -> Any:
        self.kinds[sql.lstrip().split(None, 1)[0].upper()] += 1
        if not context["connection"].in_atomic_block:
            self.autocommitted += 1
        return execute(sql, params, many, context)

    def per(self, units: int) -> dict[str, Any]:
        return {
            "statements": sum(self.kinds.values()) / units,
            "transactions": (self.commits + self.autocommitted) / units,
            "by_kind": {kind: n / units for kind, n in sorted(self.kinds.items())},
        }


@contextmanager
def counting() -> Iterator[StatementLog]:
    log = StatementLog()
    commit = connection.commit

    def counted_commit() -> None:
        log.commits += 1
        commit()

    with connection.execute_wrapper(log), mock.patch.object(connection, "commit", counted_commit):
        yield log


def count(batch_size: int | None, effective_batch_size: int) -> dict[str, Any]:
    """Count per published start event and per fired timer (W of two batches)."""
    found: dict[str, Any] = {}
    for label, start in (
        ("publish_start_event", lambda key: publish(workloads.start_event(key))),
        ("start_by_hand", lambda key: baselines.start_by_hand(key, workloads.STEP_NOTE)),
    ):
        database.reset_saga_tables()
        with counting() as log:
            for i in range(EVENTS):
                start(f"count-{i}")
        found[label] = log.per(EVENTS)

    timers = 2 * effective_batch_size
    for label, drain in (
        ("fire_timer_drain_due", lambda: drain_due(batch_size=batch_size).settled),
        ("fire_timer_by_hand", baselines.fire_one_by_hand),
    ):
        database.reset_saga_tables()
        workloads.write_due_reminders(timers)
        with counting() as log:
            while drain():
                pass
        workloads.check_reminders_fired(timers)
        found[label] = {**log.per(timers), "timers": timers, "batch_size": effective_batch_size}
    database.reset_saga_tables()
    return found
