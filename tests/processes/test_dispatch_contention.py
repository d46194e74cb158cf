"""Eight dispatchers on sagas with two due timers each, while replies race their expiries.

A saga with two timers due together is the case that used to hold the dispatchers up: two
passes firing one timer each of the same saga, each holding the locks of a whole batch,
deadlocked on the instance rows. Each phase runs eight fresh
``tests/workers/timer_drain.py`` children, released together on freshly written rows in
emptied tables:

- **two timers per saga**: 3,000 ``NoticeFlow`` sagas whose "reminder" and "final-notice"
  fell due at random instants of the last ten minutes;
- **the race**: the same notices again, and 600 ``QuestionFlow`` sagas whose "expiry"
  timers fall due in six slices across that backlog, the first questions' last; once the
  dispatchers claim the first expiry, ``tests/workers/answer_race.py`` publishes an answer
  to every question, in their order: the first answers come before the dispatchers reach
  their expiries, the last ones after, and those between race a pass that has their expiry
  claimed. (All due at one instant, the expiries once sat together in claim order, and
  eight dispatchers now fire such a block faster than one publisher starts answering.)

Then: no deadlock in the test database, every timer's effect exactly once, every saga done.
On PostgreSQL and on MariaDB (whose deadlock count is the server's: nothing else runs
there meanwhile).
How fast two timers per saga drain next to one is a figure of ``make bench``
(``drain_ratio_two_timers_per_saga``), never an assertion here: a test that times itself
fails on a busy machine, not on a wrong result.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.db.models import Count, Exists, OuterRef, QuerySet
from django.utils import timezone

from bsft_saga.models import (
    SagaInboxEntry,
    SagaInstance,
    SagaTimeout,
    TimeoutOutcome,
)
from tests.support.processes import supervised
from tests.support.saga_tables import reset_saga_tables, vacuum_analyze
from tests.support.services import require_server_database
from tests.testapp.bulk import bulk_ask_questions, bulk_open_notices
from tests.testapp.dispatch_flows import NOTICE_TIMERS, NoticeFlow, QuestionFlow

pytestmark = pytest.mark.slow

SAGAS = 3_000
QUESTIONS = 600
DISPATCHERS = 8
BACKLOG = timedelta(minutes=10)
# Each phase drains in seconds on an idle 2-core box; the bounds leave room for a busy
# one, so that only a wrong result fails the test, never a slow machine.
PHASE_SECONDS = 150


@dataclass(frozen=True)
class Phase:
    """When one phase's dispatchers were released, when they stamped its own timers fired
    (in order), and what they reported."""

    released: datetime
    stamps: list[datetime]
    reports: list[dict[str, Any]]

    @property
    def seconds(self) -> float:
        """From the release to the last stamp."""
        return (self.stamps[-1] - self.released).total_seconds()

    def total(self, key: str) -> int:
        return sum(int(report[key]) for report in self.reports)

    def __str__(self) -> str:  # said in a failure's message, never asserted
        return (
            f"{len(self.stamps)} timers in {self.seconds:.2f} s, "
            f"{self.total('deliveries')} deliveries ({self.total('delivered_again')} "
            f"again after a lost race), {self.total('passes')} passes"
        )


@pytest.mark.timeout(2 * PHASE_SECONDS + 120)
def test_two_due_timers_per_saga_fire_once_without_deadlocks_while_replies_race_expiries(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    require_server_database()
    deadlocks_before = _deadlocks()
    now = timezone.now()
    rng = random.Random(20261201)
    found: dict[str, Any] = {}
    expected: dict[str, Any] = {}

    def write_notices() -> None:
        bulk_open_notices(_notices(rng, now), now)

    two = _drain(
        subprocess_env,
        tmp_path / "two_timers_per_saga",
        write_notices,
        saga_type=NoticeFlow.saga_type,
    )
    found["two timers per saga"], expected["two timers per saga"] = _noticed_once(two)
    reset_saga_tables()

    notices = _notices(rng, now)
    questions = [f"question-{i:04d}" for i in range(QUESTIONS)]

    def write_the_race() -> None:
        bulk_open_notices(notices, now)
        slices = 6
        for n in range(slices):  # the first questions expire last
            every = len(questions) // slices
            due = now - BACKLOG * (n + 0.5) / slices
            bulk_ask_questions(questions[n * every : (n + 1) * every], due, now)

    race = _drain(
        subprocess_env,
        tmp_path / "race",
        write_the_race,
        saga_type=NoticeFlow.saga_type,
        answers=questions,
    )
    found["race"], expected["race"] = _noticed_once(race, questions=True)
    found["questions"], expected["questions"] = _settled_once()
    deadlocks = _deadlocks() - deadlocks_before

    outcomes = found["questions"]["outcomes"]
    numbers = "\n".join(
        [
            f"two timers per saga: {two}",
            f"with the race: {race}; questions {outcomes}, "
            f"{race.total('unclaimed')} expiries canceled while claimed",
            f"deadlocks {deadlocks}",
        ]
    )
    print(numbers)
    assert deadlocks == 0, numbers
    assert found == expected, numbers
    # The race was run: some replies beat their expiry, and some expiries their reply.
    assert len(outcomes) == 2, numbers


def _notices(rng: random.Random, now: datetime) -> dict[str, tuple[datetime, datetime]]:
    """Keys of ``SAGAS`` notices, each with its two timers' instants in the last ``BACKLOG``."""
    return {
        f"notice-{i:05d}": (now - BACKLOG * rng.random(), now - BACKLOG * rng.random())
        for i in range(SAGAS)
    }


def _drain(
    env: dict[str, str],
    workdir: Path,
    write: Callable[[], None],
    *,
    saga_type: str,
    answers: list[str] | None = None,
) -> Phase:
    """Start the dispatchers (and, for ``answers``, their publisher), ``write`` the rows,
    release the children together; return when the timers of ``saga_type`` fired."""
    workdir.mkdir()
    with supervised(env, workdir) as children:
        started = [
            children.spawn(
                "timer_drain.py",
                # Commits stay atomic and visible to other sessions at once; only the wait
                # for the WAL flush is skipped, as in the other load tests.
                "--no-sync-commit",
                "--count-deliveries",
                *("--max-seconds", str(PHASE_SECONDS)),
                *children.barrier_args(name),
                name=name,
            )
            for name in (f"dispatcher-{n}" for n in range(DISPATCHERS))
        ]
        write()  # while the children start up
        if answers is not None:
            keys = workdir / "answers"
            keys.write_text("\n".join(answers))
            first = SagaTimeout.objects.filter(saga__saga_type=QuestionFlow.saga_type)
            started.append(
                children.spawn(
                    "answer_race.py",
                    *("--keys-file", str(keys)),
                    *("--when-claimed", str(first.order_by("due_at", "id")[0].pk)),
                    *("--max-seconds", str(PHASE_SECONDS)),
                    *children.barrier_args("publisher"),
                    name="publisher",
                )
            )
        vacuum_analyze()
        children.release_together(started)
        released = timezone.now()
        reports = [child.report(timeout=PHASE_SECONDS + 30) for child in started]
    stamps = (
        SagaTimeout.objects.filter(saga__saga_type=saga_type, outcome=TimeoutOutcome.FIRED)
        .order_by("dispatched_at")
        .values_list("dispatched_at", flat=True)
    )
    return Phase(released, [stamp for stamp in stamps if stamp], reports[:DISPATCHERS])


Found = tuple[dict[str, Any], dict[str, Any]]


def _noticed_once(phase: Phase, *, questions: bool = False) -> Found:
    """What every notice saga should show; ``questions``: the expiries fired too."""
    sagas = SagaInstance.objects.filter(saga_type=NoticeFlow.saga_type)
    both = sorted(NOTICE_TIMERS)
    states = sagas.filter(step_index=3, version=3).values_list("state", flat=True)
    timers = SagaTimeout.objects.filter(saga__in=sagas)
    found = {
        "sagas": sagas.count(),
        "noted both timers once, at step 3": sum(sorted(s["fired"]) == both for s in states),
        "with 3 inbox rows": _with_inbox_rows(sagas, 3),
        **_fired(phase, timers),
    }
    expected = {
        **dict.fromkeys(found, SAGAS),
        "timers fired once": 2 * SAGAS,
        "failed, missed, dead-lettered": 0,
    }
    if questions:
        expired = SagaTimeout.objects.filter(
            saga__saga_type=QuestionFlow.saga_type, outcome=TimeoutOutcome.FIRED
        )
        found["reported fired"] -= expired.count()
    expected["reported fired"] = 2 * SAGAS
    return found, expected


def _settled_once() -> Found:
    """Each question answered or expired once; its expiry fired iff it expired."""
    sagas = SagaInstance.objects.filter(saga_type=QuestionFlow.saga_type)
    outcomes = Counter(sagas.values_list("state__outcome", flat=True))
    expiries = SagaTimeout.objects.filter(saga__in=sagas)
    found = {
        "outcomes": dict(outcomes),
        "settled once, at step 2": sagas.filter(step_index=2, version=2).count(),
        "with 2 inbox rows": _with_inbox_rows(sagas, 2),
        "expired, their expiry fired once": _fired_once(
            expiries.filter(saga__state__outcome="expired")
        ),
        "answered, their expiry canceled": expiries.filter(
            saga__state__outcome="answered", outcome=TimeoutOutcome.CANCELED
        ).count(),
    }
    expected = {
        "outcomes": {k: v for k, v in outcomes.items() if k in ("answered", "expired")},
        "settled once, at step 2": QUESTIONS,
        "with 2 inbox rows": QUESTIONS,
        "expired, their expiry fired once": outcomes["expired"],
        "answered, their expiry canceled": outcomes["answered"],
    }
    return found, expected


def _fired(phase: Phase, timers: QuerySet[SagaTimeout]) -> dict[str, int]:
    return {
        "timers fired once": _fired_once(timers),
        "reported fired": phase.total("fired"),
        "failed, missed, dead-lettered": sum(
            phase.total(key) for key in ("failed", "missed", "dead_lettered")
        ),
    }


def _fired_once(timers: QuerySet[SagaTimeout]) -> int:
    """Timers fired, their message id in their saga's inbox, no claim left on them."""
    recorded = SagaInboxEntry.objects.filter(
        saga_id=OuterRef("saga_id"), message_id=OuterRef("message_id")
    )
    return timers.filter(Exists(recorded), outcome=TimeoutOutcome.FIRED, claimed_until=None).count()


def _with_inbox_rows(sagas: QuerySet[SagaInstance], rows: int) -> int:
    return sagas.annotate(inbox=Count("inbox_entries")).filter(inbox=rows).count()


def _deadlocks() -> int:
    """Deadlocks the database has detected so far: PostgreSQL's in the test database,
    InnoDB's in the whole server.

    Every child has exited when this is read, and a PostgreSQL backend flushes its
    statistics when it exits; the snapshot is cleared so that the second read is fresh.
    """
    with connection.cursor() as cursor:
        if connection.vendor == "mysql":
            cursor.execute("SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'")
            (_name, count) = cursor.fetchone()
            return int(count)
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
        (count,) = cursor.fetchone()
    return int(count)
