"""Eight dispatchers on sagas with two due timers each, while replies race their expiries.

A saga with two timers due together is the case that used to stall the dispatchers: two
passes firing one timer each of the same saga, each holding the locks of a whole batch,
deadlocked on the instance rows. Each phase runs eight fresh
``tests/workers/timer_drain.py`` children, released together on freshly written rows in
emptied tables:

- **one timer per saga**: 3,000 ``CountingFlow`` sagas, each with one due timer;
- **two timers per saga**: 3,000 ``NoticeFlow`` sagas whose "reminder" and "final-notice"
  fell due at random instants of the last ten minutes;
- after three rounds of both, **the race**: the same notices again, and 600
  ``QuestionFlow`` sagas whose "expiry" timers fall due in six slices across that backlog,
  the first questions' last; once the dispatchers claim the first expiry,
  ``tests/workers/answer_race.py`` publishes an answer to every question, in their order:
  the first answers come before the dispatchers reach their expiries, the last ones after,
  and those between race a pass that has their expiry claimed. (All due at one instant,
  the expiries once sat together in claim order, and eight dispatchers now fire such a
  block faster than one publisher starts answering.)

Then: no deadlock in the test database, every timer's effect exactly once, and the rate
with two timers per saga at least ``MIN_RATIO`` of the rate with one.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
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
from tests.support.services import require_postgres_backend
from tests.testapp.bulk import bulk_ask_questions, bulk_open_notices, bulk_start_counters
from tests.testapp.dispatch_flows import NOTICE_TIMERS, NoticeFlow, QuestionFlow
from tests.testapp.load_flows import CountingFlow

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

SAGAS = 3_000
QUESTIONS = 600
DISPATCHERS = 8
BACKLOG = timedelta(minutes=10)
MIN_RATIO = 0.8
ROUNDS = 3
# The rate is taken between the 10th and the 90th percentile of a phase's stamps: the
# dispatchers' first claims and their last, uneven batches stay out of it, and they would
# weigh more in the shorter phase (one timer per saga) than in the longer one.
STEADY = (0.1, 0.9)
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
    def rate(self) -> float:
        """Timers a second in the steady part of the phase (see ``STEADY``)."""
        first, last = (round(q * (len(self.stamps) - 1)) for q in STEADY)
        return (last - first) / (self.stamps[last] - self.stamps[first]).total_seconds()

    @property
    def seconds(self) -> float:
        """From the release to the last stamp."""
        return (self.stamps[-1] - self.released).total_seconds()

    def total(self, key: str) -> int:
        return sum(int(report[key]) for report in self.reports)

    def __str__(self) -> str:
        return (
            f"{len(self.stamps)} timers in {self.seconds:.2f} s "
            f"({len(self.stamps) / self.seconds:.0f}/s), steady {self.rate:.0f}/s, "
            f"{self.total('deliveries')} deliveries ({self.total('delivered_again')} "
            f"again after a lost race), {self.total('passes')} passes"
        )


@pytest.mark.timeout((2 * ROUNDS + 1) * PHASE_SECONDS + 120)
def test_two_due_timers_per_saga_fire_once_without_deadlocks_nearly_as_fast_as_one(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    require_postgres_backend()
    deadlocks_before = _deadlocks()
    now = timezone.now()
    rng = random.Random(20261201)
    found: dict[str, Any] = {}
    expected: dict[str, Any] = {}

    def measured(name: str, write: Callable[[], None], saga_type: str, check: Check) -> Phase:
        phase = _drain(subprocess_env, tmp_path / name, write, saga_type=saga_type)
        found[name], expected[name] = check(phase)
        return phase

    def one_timer_per_saga(name: str) -> Phase:
        write = partial(bulk_start_counters, [f"count-{i:05d}" for i in range(SAGAS)], now)
        return measured(name, write, CountingFlow.saga_type, _counted_once)

    def two_timers_per_saga(name: str) -> Phase:
        write = partial(bulk_open_notices, _notices(rng, now), now)
        return measured(name, write, NoticeFlow.saga_type, _noticed_once)

    ones: list[Phase] = []
    twos: list[Phase] = []
    for number in range(ROUNDS):
        # A B, B A, A B: a machine that grows busier or quieter over the test slows or
        # speeds up both flows alike.
        pair = [(ones, one_timer_per_saga), (twos, two_timers_per_saga)]
        for phases, run in pair if number % 2 == 0 else reversed(pair):
            phases.append(run(f"{run.__name__}-{number}"))
            _empty_saga_tables()

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

    ratio = max(two.rate / one.rate for one, two in zip(ones, twos, strict=True))
    outcomes = found["questions"]["outcomes"]
    numbers = "\n".join(
        [
            *(f"one timer per saga, round {n}: {phase}" for n, phase in enumerate(ones)),
            *(f"two timers per saga, round {n}: {phase}" for n, phase in enumerate(twos)),
            f"best ratio of a round's two phases {ratio:.2f}",
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
    # Both flows are measured alike: eight fresh dispatchers released together on freshly
    # written, vacuumed and analysed rows in emptied tables, rated over the steady part of
    # their stamps, in interleaved rounds; a round's two phases run back to back, so they
    # share the machine's load, and the best round's ratio counts. Other work on two shared
    # cores slows single phases down (to half the rate, seen in a CI run beside other test
    # runs: one round 0.61, the others 1.03 and 1.16), never every round alike. Why 0.8 holds
    # without being loose: firing a NoticeFlow timer writes what firing a CountingFlow
    # timer writes (a version-checked advance, an inbox row, a stamp), and with one
    # dispatcher, where no sibling is ever in flight elsewhere, the second flow runs at
    # 0.91-0.96 of the first (its tables hold twice the timers). With eight, contention
    # comes on top: a timer whose sibling is in flight in another pass waits for that
    # saga's row lock, loses the version race and is delivered again (3-5% of them),
    # 0.85-0.98 in all. Passes stalled behind each other's batches (a twentieth of the
    # one-timer rate, when they held their locks while user code ran) fail it by far.
    assert ratio >= MIN_RATIO, numbers


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
        _vacuum_analyze()
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
Check = Callable[[Phase], Found]


def _counted_once(phase: Phase) -> Found:
    sagas = SagaInstance.objects.filter(saga_type=CountingFlow.saga_type)
    found = {
        "sagas": sagas.count(),
        "counted once, at step 2": sagas.filter(step_index=2, version=2, state__count=1).count(),
        "with 2 inbox rows": _with_inbox_rows(sagas, 2),
        **_fired(phase, SagaTimeout.objects.filter(saga__in=sagas)),
    }
    return found, {**dict.fromkeys(found, SAGAS), "failed, missed, dead-lettered": 0}


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
    """Deadlocks PostgreSQL has detected in the test database so far.

    Every child has exited when this is read, and a backend flushes its statistics when
    it exits; the snapshot is cleared so that the second read is fresh.
    """
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
        (count,) = cursor.fetchone()
    return int(count)


def _saga_tables() -> list[str]:
    """Every table of bsft_saga's models (TRUNCATE refuses one whose referrers it leaves)."""
    models = apps.get_app_config("bsft_saga").get_models()
    return [connection.ops.quote_name(model._meta.db_table) for model in models]


def _empty_saga_tables() -> None:
    """Start the next phase from tables as empty as the first one's."""
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {', '.join(_saga_tables())}")


def _vacuum_analyze() -> None:
    """Fresh statistics for the rows just written, before any dispatcher plans a claim."""
    with connection.cursor() as cursor:
        for table in _saga_tables():
            cursor.execute(f"VACUUM ANALYZE {table}")
