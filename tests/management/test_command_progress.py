"""The progress line of the long commands: drawn on a terminal, never in a pipe or at -v 0.

``purge_saga_data``, ``erase_saga_data`` and the three requeues of dead letters rewrite one
line after each batch while stdout is a terminal, and wipe it before their own output, so
that what they print is the same with or without it (scripts read the last line).
"""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.core.management.base import OutputWrapper
from django.db import transaction
from freezegun import freeze_time

from bsft_saga import clock
from bsft_saga.management.progress import ProgressLine
from bsft_saga.models import SagaKeptEvent, SagaTimeout, TimeoutOutcome
from tests.support.retention_rows import outbox_row, saga
from tests.testapp.ops_flows import make_saga, make_timer

pytestmark = pytest.mark.django_db

#: One drawing of the progress line, and the wipe before the command's own output.
DRAWN = re.compile(r"\r([^\r\n]*)\x1b\[K")
WIPE = "\r\x1b[K"


class Terminal(StringIO):
    """A stdout that says it is a terminal, as an operator's shell is."""

    def isatty(self) -> bool:
        return True


def drawn(out: str) -> list[str]:
    """The progress lines drawn, in order, the wipe left out."""
    return [line for line in DRAWN.findall(out) if line]


def without_progress(out: str) -> str:
    return DRAWN.sub("", out)


def run_on(stdout: StringIO, *args: str) -> str:
    """Run a command with ``stdout``, inside a savepoint rolled back after it: the same rows
    are there for the next run."""
    with transaction.atomic():
        try:
            call_command(*args, stdout=stdout, stderr=StringIO(), no_color=True)
        finally:
            transaction.set_rollback(True)
    return stdout.getvalue()


def on_terminal_and_in_a_pipe(*args: str) -> tuple[str, str]:
    """The command's output on a terminal and in a pipe, over the same rows at one moment."""
    with freeze_time(clock.now()):
        return run_on(Terminal(), *args), run_on(StringIO(), *args)


@pytest.fixture
def old_data() -> None:
    """Three finished instances 40 days old, each with two inbox rows, a fired timer and a
    delivered outbox row: 21 rows a purge deletes (3 instances, 6 inbox rows, 6 journal
    entries, 3 timers, 3 outbox rows)."""
    old = clock.now() - timedelta(days=40)
    for key in ("a", "b", "c"):
        done = saga(key, started_at=old, completed_at=old, events=2)
        make_timer(done, "remind", outcome=TimeoutOutcome.FIRED, dispatched_at=old)
        outbox_row(done, created_at=old, delivered_at=old)


# -- the line itself ---------------------------------------------------------------------------


def test_the_line_shows_rows_so_far_the_rate_and_what_remains() -> None:
    moments = iter([100.0, 102.0, 104.0])
    out = Terminal()
    line = ProgressLine(_wrapped(out), "rows deleted", clock=lambda: next(moments))

    line(1000, 4000)
    line(2000, 4000)
    line.wipe()

    assert drawn(out.getvalue()) == [
        "1,000 of 4,000 rows deleted, 500/s, 3,000 left",
        "2,000 of 4,000 rows deleted, 500/s, 2,000 left",
    ]
    assert out.getvalue().endswith(WIPE)


def test_more_rows_than_counted_never_show_a_negative_remainder() -> None:
    out = Terminal()
    line = ProgressLine(_wrapped(out), "rows deleted", clock=lambda: 0.0)

    line(12, 10)

    assert drawn(out.getvalue()) == ["12 of 12 rows deleted, 0 left"]


def test_nothing_drawn_nothing_wiped() -> None:
    out = Terminal()
    ProgressLine(_wrapped(out), "rows deleted").wipe()

    assert out.getvalue() == ""


# -- purge_saga_data ---------------------------------------------------------------------------


def test_purge_draws_its_progress_per_batch_on_a_terminal(old_data: None) -> None:
    tty, pipe = on_terminal_and_in_a_pipe("purge_saga_data", "--batch-size", "2")

    lines = drawn(tty)
    assert len(lines) >= 21 / 2  # one per statement that deleted rows, 2 rows at most each
    assert all(re.fullmatch(r"\d+ of 21 rows deleted(, [\d,]+/s)?, \d+ left", x) for x in lines)
    assert lines[-1].startswith("21 of 21 rows deleted")
    assert lines[-1].endswith(", 0 left")
    assert without_progress(tty) == pipe
    assert "\r" not in pipe
    assert pipe.splitlines()[-1] == (
        "instances=3 inbox=6 journal=6 timeouts=3 outbox=3 audit=0 dispatchers=0"
    )


def test_purge_at_verbosity_0_draws_nothing_even_on_a_terminal(old_data: None) -> None:
    tty, pipe = on_terminal_and_in_a_pipe("purge_saga_data", "--verbosity", "0")

    assert tty == pipe
    assert "\r" not in tty


def test_a_dry_run_deletes_nothing_and_draws_nothing(old_data: None) -> None:
    tty, pipe = on_terminal_and_in_a_pipe("purge_saga_data", "--dry-run")

    assert tty == pipe


# -- erase_saga_data ---------------------------------------------------------------------------


def test_erase_draws_the_instances_done_on_a_terminal() -> None:
    old = clock.now() - timedelta(days=1)
    for _ in range(3):
        saga("erased", started_at=old, completed_at=old)

    tty, pipe = on_terminal_and_in_a_pipe("erase_saga_data", "tests.ops.reminder", "erased")

    assert [line.split(",")[0] for line in drawn(tty)] == [
        "1 of 3 instances",
        "2 of 3 instances",
        "3 of 3 instances",
    ]
    assert without_progress(tty) == pipe
    assert pipe.splitlines()[-1] == "instances=3"


# -- the requeues ------------------------------------------------------------------------------


def test_requeue_saga_timeouts_all_draws_every_hundred_timers() -> None:
    owner = make_saga("many")
    for n in range(150):
        make_timer(owner, f"t{n}", outcome=TimeoutOutcome.DEAD_LETTERED)

    tty, pipe = on_terminal_and_in_a_pipe("requeue_saga_timeouts", "--all-dead-lettered")

    assert [line.split(",")[0] for line in drawn(tty)] == [
        "100 of 150 dead-lettered timers",
        "150 of 150 dead-lettered timers",
    ]
    assert without_progress(tty) == pipe == "Requeued 150 dead-lettered timer(s).\n"


def test_requeue_saga_outbox_draws_on_a_terminal_only() -> None:
    outbox_row(None, created_at=clock.now(), dead_lettered_at=clock.now())

    tty, pipe = on_terminal_and_in_a_pipe("requeue_saga_outbox", "--all-dead-lettered")

    assert [line.split(",")[0] for line in drawn(tty)] == ["1 of 1 dead-lettered outbox messages"]
    assert without_progress(tty) == pipe == "Requeued 1 dead-lettered outbox message(s).\n"


def test_requeue_saga_kept_events_draws_on_a_terminal_only() -> None:
    _dead_kept_event(make_saga("kept"))

    tty, pipe = on_terminal_and_in_a_pipe("requeue_saga_kept_events", "--all")

    assert [line.split(",")[0] for line in drawn(tty)] == ["1 of 1 dead-lettered kept events"]
    assert without_progress(tty) == pipe == "Requeued 1 dead-lettered kept event(s).\n"


def test_a_refused_requeue_wipes_its_line_before_its_summary_and_error() -> None:
    out = Terminal()

    with pytest.raises(CommandError, match="not requeued"):
        run_on(out, "requeue_saga_outbox", "--id", str(uuid.uuid4()))

    assert [line.split(",")[0] for line in drawn(out.getvalue())] == [
        "1 of 1 dead-lettered outbox messages"
    ]
    assert out.getvalue().endswith(f"{WIPE}Requeued 0 dead-lettered outbox message(s).\n")


def test_a_requeue_at_verbosity_0_draws_nothing_on_a_terminal() -> None:
    owner = make_saga("quiet")
    make_timer(owner, outcome=TimeoutOutcome.DEAD_LETTERED)

    tty, pipe = on_terminal_and_in_a_pipe("requeue_saga_timeouts", "--all-dead-lettered", "-v", "0")

    assert tty == pipe == ""
    assert SagaTimeout.objects.get().dead_lettered_at is not None  # rolled back after each run


def _dead_kept_event(owner: Any) -> SagaKeptEvent:
    moment = clock.now()
    return SagaKeptEvent.objects.create(
        saga=owner,
        saga_type=owner.saga_type,
        correlation_key=owner.correlation_key,
        step_index=owner.step_index,
        event_type="tests.ops.noted",
        payload={"note": "kept"},
        message_id=uuid.uuid4(),
        kept_at=moment,
        attempts=3,
        dead_lettered_at=moment,
    )


def _wrapped(out: StringIO) -> OutputWrapper:
    return OutputWrapper(out)


def test_the_services_tell_their_progress_callback(old_data: None) -> None:
    from bsft_saga.retention import erase_saga_data, purge_saga_data
    from bsft_saga.timeouts.maintenance import requeue_dead_lettered

    purged: list[tuple[int, int]] = []
    purge_saga_data(batch_size=5, progress=lambda done, total: purged.append((done, total)))
    old = clock.now() - timedelta(days=1)
    saga("erased", started_at=old, completed_at=old)
    erased: list[tuple[int, int]] = []
    erase_saga_data("tests.ops.reminder", "erased", progress=lambda *told: erased.append(told))
    make_timer(make_saga("requeued"), outcome=TimeoutOutcome.DEAD_LETTERED)
    requeued: list[tuple[int, int]] = []
    requeue_dead_lettered(progress=lambda *told: requeued.append(told))

    assert purged[-1] == (21, 21)
    assert [done for done, _ in purged] == sorted({done for done, _ in purged})
    assert erased == [(1, 1)]
    assert requeued == [(1, 1)]
