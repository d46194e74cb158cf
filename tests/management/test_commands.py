"""The management commands: drain, purge, requeue, graph."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import OperationalError
from django.test import override_settings

from bsft_saga import clock, publish
from bsft_saga.draining import RoundReport
from bsft_saga.flows.graph import render, render_dot, render_mermaid
from bsft_saga.flows.registry import flow_registry
from bsft_saga.management.commands.purge_saga_timeouts import parse_duration
from bsft_saga.models import SagaInstance, SagaOutboxMessage, SagaTimeout, TimeoutOutcome
from bsft_saga.outbox import DeliveryReport
from bsft_saga.timeouts.dispatcher import DrainReport
from tests.testapp.ops_events import Noted, ReminderRequested
from tests.testapp.ops_flows import REMINDER_SAGA_TYPE, make_saga, make_timer

TOTALS = "fired={} missed={} failed={} dead_lettered={} unclaimed={}"


def run(*args: str, **options: Any) -> tuple[str, str]:
    """``call_command`` with captured output; returns (stdout, stderr)."""
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err, **options)
    return out.getvalue(), err.getvalue()


def last_line(text: str) -> str:
    return text.rstrip("\n").splitlines()[-1]


def start_reminders(*keys: str) -> None:
    """Reminder sagas whose one timer is due now; firing it completes the saga."""
    for key in keys:
        publish(ReminderRequested(key, delay_seconds=0))


def completed(*keys: str) -> set[str]:
    return set(
        SagaInstance.objects.filter(
            saga_type=REMINDER_SAGA_TYPE, correlation_key__in=keys, is_complete=True
        ).values_list("correlation_key", flat=True)
    )


@pytest.fixture
def max_attempts_2() -> Iterator[None]:
    delivery = {**settings.BSFT_SAGA["DELIVERY"], "MAX_DISPATCH_ATTEMPTS": 2}
    with override_settings(BSFT_SAGA={**settings.BSFT_SAGA, "DELIVERY": delivery}):
        yield


# -- drain_saga_timeouts ------------------------------------------------------------------------


@pytest.mark.django_db
def test_drain_fires_due_timers_and_ends_with_the_totals_line() -> None:
    start_reminders("d1", "d2")

    out, _ = run("drain_saga_timeouts")

    assert last_line(out) == TOTALS.format(2, 0, 0, 0, 0)
    assert completed("d1", "d2") == {"d1", "d2"}


@pytest.mark.django_db
def test_drain_prints_only_the_totals_line_at_verbosity_0_and_1() -> None:
    assert run("drain_saga_timeouts", verbosity=0)[0] == TOTALS.format(0, 0, 0, 0, 0) + "\n"
    assert run("drain_saga_timeouts", verbosity=1)[0] == TOTALS.format(0, 0, 0, 0, 0) + "\n"


@pytest.mark.django_db
def test_drain_delivers_stranded_outbox_rows_and_reports_them_at_verbosity_2() -> None:
    # Outside a committed transaction the after-commit hand-off never runs: the row is
    # exactly what a process that died after its commit leaves behind.
    publish(Noted("stranded"), defer=True)

    out, _ = run("drain_saga_timeouts", verbosity=2)

    assert out.splitlines()[-2:] == ["outbox: delivered=1 failed=0", TOTALS.format(0, 0, 0, 0, 0)]
    assert SagaOutboxMessage.objects.get().delivered_at is not None


@pytest.mark.django_db
def test_drain_runs_one_pass_of_batch_size() -> None:
    start_reminders("b1", "b2", "b3")

    out, _ = run("drain_saga_timeouts", "--batch-size", "1")

    assert last_line(out) == TOTALS.format(1, 0, 0, 0, 0)
    assert completed("b1", "b2", "b3") == {"b1"}


@pytest.mark.django_db
def test_drain_until_empty_repeats_passes_until_one_finds_nothing() -> None:
    start_reminders("u1", "u2", "u3")

    out, _ = run("drain_saga_timeouts", "--until-empty", "--batch-size", "1", verbosity=2)

    lines = out.splitlines()
    assert [line for line in lines if line.startswith("pass ") and "outbox" not in line] == [
        "pass 1: " + TOTALS.format(1, 0, 0, 0, 0),
        "pass 2: " + TOTALS.format(1, 0, 0, 0, 0),
        "pass 3: " + TOTALS.format(1, 0, 0, 0, 0),
        "pass 4: " + TOTALS.format(0, 0, 0, 0, 0),
    ]
    assert lines[-1] == TOTALS.format(3, 0, 0, 0, 0)
    assert completed("u1", "u2", "u3") == {"u1", "u2", "u3"}


@pytest.mark.django_db
@pytest.mark.usefixtures("max_attempts_2")
def test_drain_until_empty_does_not_spin_on_a_row_that_waits_for_its_retry() -> None:
    start_reminders("poison", "fine")
    SagaTimeout.objects.filter(saga__correlation_key="poison").update(
        event_type="tests.ops.renamed-away"
    )

    out, _err = run("drain_saga_timeouts", "--until-empty")

    assert last_line(out) == TOTALS.format(1, 0, 1, 0, 0)
    poison = SagaTimeout.objects.get(saga__correlation_key="poison")
    assert (poison.is_pending, poison.attempts) == (True, 1)
    assert poison.next_attempt_at is not None
    assert poison.next_attempt_at > clock.now()


@pytest.mark.django_db
def test_drain_warns_about_the_timers_it_dead_lettered() -> None:
    start_reminders("poison")
    SagaTimeout.objects.update(event_type="tests.ops.renamed-away")

    with override_settings(BSFT_SAGA={"DELIVERY": {"MAX_DISPATCH_ATTEMPTS": 1}}):
        out, err = run("drain_saga_timeouts", "--until-empty")

    assert last_line(out) == TOTALS.format(0, 0, 0, 1, 0)
    assert "1 timer(s) were dead-lettered" in err
    assert SagaTimeout.objects.get().outcome == TimeoutOutcome.DEAD_LETTERED


@pytest.mark.parametrize("size", ["0", "-5"])
def test_drain_rejects_a_batch_size_that_is_not_positive(size: str) -> None:
    with pytest.raises(CommandError, match="--batch-size must be a positive integer"):
        run("drain_saga_timeouts", "--batch-size", size)


def test_drain_modes_exclude_each_other() -> None:
    with pytest.raises(CommandError, match="not allowed with argument"):
        run("drain_saga_timeouts", "--until-empty", "--loop")


@pytest.mark.django_db
def test_drain_loop_outlives_a_failed_pass_and_restores_the_sigterm_handler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from bsft_saga import draining

    passes: list[int] = []

    def database_blip_then_sigterm(
        *, batch_size: int | None = None, now: datetime | None = None
    ) -> RoundReport:
        passes.append(1)
        if len(passes) == 1:
            raise OperationalError("server closed the connection unexpectedly")
        # The command's handler is installed, so this stops the loop, not the test run.
        assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN, None)
        os.kill(os.getpid(), signal.SIGTERM)
        return RoundReport(timers=DrainReport(fired=2), outbox=DeliveryReport())

    monkeypatch.setattr(draining, "drain_round", database_blip_then_sigterm)
    handler_before = signal.getsignal(signal.SIGTERM)
    delivery = {**settings.BSFT_SAGA["DELIVERY"], "POLL_INTERVAL": 0.01}

    with override_settings(BSFT_SAGA={**settings.BSFT_SAGA, "DELIVERY": delivery}):
        out, err = run("drain_saga_timeouts", "--loop")

    assert "pass 1 failed: OperationalError" in err
    assert len(passes) == 2
    assert last_line(out) == TOTALS.format(2, 0, 0, 0, 0)
    assert signal.getsignal(signal.SIGTERM) is handler_before


def _read_until(
    process: subprocess.Popen[bytes], done: Callable[[str], bool], timeout: float = 60
) -> str:
    """Read the child's stdout until ``done(text so far)``; fail after ``timeout`` seconds."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    text = b""
    deadline = time.monotonic() + timeout
    while not done(text.decode()):
        remaining = deadline - time.monotonic()
        ready, _, _ = select.select([fd], [], [], max(remaining, 0))
        chunk = os.read(fd, 65536) if ready else b""
        if not chunk:
            process.kill()
            raise AssertionError(f"child printed {text.decode()!r}, then nothing for a while")
        text += chunk
    return text.decode()


# ``python -m django`` as it is, and the same with SIGINT handled as Python does by default:
# a child of a shell without job control inherits SIGINT ignored, and Ctrl-C must reach it.
DJANGO = [sys.executable, "-m", "django"]
DJANGO_WITH_CTRL_C = [
    sys.executable,
    "-c",
    "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from django.core.management import execute_from_command_line; "
    "execute_from_command_line(['django-admin', *sys.argv[1:]])",
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("launcher", "stop"),
    [(DJANGO, signal.SIGTERM), (DJANGO_WITH_CTRL_C, signal.SIGINT)],
    ids=["sigterm", "ctrl-c"],
)
def test_drain_loop_stops_cleanly_after_a_signal_with_the_totals_line(
    subprocess_env: dict[str, str], launcher: list[str], stop: signal.Signals
) -> None:
    start_reminders("loop")
    process = subprocess.Popen(
        [*launcher, "drain_saga_timeouts", "--loop", "-v", "2"],
        env=subprocess_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        first = _read_until(process, lambda text: "pass 1: fired=1" in text)
        process.send_signal(stop)
        rest, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()

    output = first + rest.decode()
    assert process.returncode == 0, err.decode()
    assert last_line(output) == TOTALS.format(1, 0, 0, 0, 0)
    assert completed("loop") == {"loop"}


# -- purge_saga_timeouts ------------------------------------------------------------------------


@pytest.fixture
def old_rows(db: Any) -> dict[str, SagaTimeout]:
    """A fired and a dead-lettered row retired 40 days ago, a fired row of 1 day, a pending row."""
    now = clock.now()
    saga = make_saga("purge")
    return {
        "fired": make_timer(saga, "fired", outcome="fired", dispatched_at=now - timedelta(40)),
        "dead": make_timer(
            saga, "dead", outcome="dead_lettered", dispatched_at=now - timedelta(40)
        ),
        "recent": make_timer(saga, "recent", outcome="fired", dispatched_at=now - timedelta(1)),
        "pending": make_timer(saga, "pending", due_at=now - timedelta(40)),
    }


def _names() -> set[str]:
    return set(SagaTimeout.objects.values_list("name", flat=True))


def test_purge_deletes_old_retired_rows_and_says_how_many(old_rows: Any) -> None:
    out, _ = run("purge_saga_timeouts", "--older-than", "30d")

    assert out.startswith("Deleted 2 saga timer rows retired before ")
    assert _names() == {"recent", "pending"}


def test_purge_keep_dead_lettered_keeps_them(old_rows: Any) -> None:
    out, _ = run("purge_saga_timeouts", "--older-than", "30d", "--keep-dead-lettered")

    assert out.startswith("Deleted 1 saga timer rows")
    assert "(dead-lettered rows kept)" in out
    assert _names() == {"dead", "recent", "pending"}


def test_purge_dry_run_counts_and_deletes_nothing(old_rows: Any) -> None:
    out, _ = run("purge_saga_timeouts", "--older-than", "12h", "--dry-run")

    assert out.startswith("Would delete 3 saga timer rows")
    assert len(_names()) == 4


def test_purge_in_small_batches_deletes_everything_it_should(old_rows: Any) -> None:
    run("purge_saga_timeouts", "--older-than", "45s", "--batch-size", "1")

    assert _names() == {"pending"}


def test_purge_is_silent_at_verbosity_0(old_rows: Any) -> None:
    assert run("purge_saga_timeouts", "--older-than", "30d", verbosity=0) == ("", "")
    assert _names() == {"recent", "pending"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("45s", timedelta(seconds=45)),
        ("90m", timedelta(minutes=90)),
        ("12h", timedelta(hours=12)),
        ("30d", timedelta(days=30)),
        ("2w", timedelta(weeks=2)),
    ],
)
def test_purge_durations_take_one_unit_of_s_m_h_d_w(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["30", "30x", "-1d", "1.5d", "1d12h", "d", "thirty days", ""])
def test_purge_rejects_other_durations_naming_the_value(text: str) -> None:
    with pytest.raises(CommandError, match=f"--older-than: '{text}' is not a duration"):
        run("purge_saga_timeouts", f"--older-than={text}")


def test_purge_requires_older_than() -> None:
    with pytest.raises(CommandError, match="--older-than"):
        run("purge_saga_timeouts")


# -- requeue_saga_timeouts ----------------------------------------------------------------------


@pytest.mark.django_db
def test_requeue_by_id_requeues_and_reports() -> None:
    dead = make_timer(make_saga("r1"), outcome="dead_lettered")

    out, err = run("requeue_saga_timeouts", "--id", str(dead.pk))

    assert out == "Requeued 1 dead-lettered timer(s).\n"
    assert err == ""
    assert SagaTimeout.objects.get(pk=dead.pk).dispatched_at is None


@pytest.mark.django_db
def test_requeue_takes_several_ids_and_repeated_options() -> None:
    rows = [make_timer(make_saga(f"ids-{n}"), outcome="dead_lettered") for n in range(3)]

    out, _ = run(
        "requeue_saga_timeouts", "--id", str(rows[0].pk), str(rows[1].pk), "--id", str(rows[2].pk)
    )

    assert out == "Requeued 3 dead-lettered timer(s).\n"


@pytest.mark.django_db
def test_requeue_all_dead_lettered() -> None:
    for n in range(2):
        make_timer(make_saga(f"all-{n}"), outcome="dead_lettered")
    make_timer(make_saga("fired"), outcome="fired")

    out, _ = run("requeue_saga_timeouts", "--all-dead-lettered")

    assert out == "Requeued 2 dead-lettered timer(s).\n"
    assert SagaTimeout.objects.dead_lettered().count() == 0


@pytest.mark.django_db
def test_requeue_names_each_refusal_requeues_the_others_and_then_fails() -> None:
    saga = make_saga("twin")
    dead = make_timer(saga, outcome="dead_lettered")
    pending = make_timer(saga)
    fine = make_timer(make_saga("fine"), outcome="dead_lettered")
    out, err = StringIO(), StringIO()

    with pytest.raises(CommandError, match=rf"2 timer\(s\) not requeued: {dead.pk}, 424242"):
        call_command(
            "requeue_saga_timeouts",
            "--id",
            str(dead.pk),
            "424242",
            str(fine.pk),
            stdout=out,
            stderr=err,
        )

    assert out.getvalue() == "Requeued 1 dead-lettered timer(s).\n"
    refusals = err.getvalue().splitlines()
    assert refusals[0].startswith(f"refused {dead.pk}: timer 'remind' (id {dead.pk}) of saga ")
    assert f"pending timer 'remind' (id {pending.pk})" in refusals[0]
    assert refusals[1] == "refused 424242: timer 424242 does not exist"
    assert SagaTimeout.objects.get(pk=fine.pk).is_pending


@pytest.mark.parametrize(
    "args", [(), ("--all-dead-lettered", "--id", "1")], ids=["neither", "both"]
)
def test_requeue_needs_exactly_one_of_all_or_ids(args: tuple[str, ...]) -> None:
    with pytest.raises(CommandError, match="--all-dead-lettered"):
        run("requeue_saga_timeouts", *args)


def test_requeue_ids_must_be_integers() -> None:
    with pytest.raises(CommandError, match="--id: 'abc' is not an integer"):
        run("requeue_saga_timeouts", "--id", "abc")


# -- saga_graph ---------------------------------------------------------------------------------


def test_saga_graph_prints_one_flow_as_mermaid_by_default() -> None:
    out, _ = run("saga_graph", "quotes.follow-up")

    assert out == render_mermaid(flow_registry.get("quotes.follow-up")) + "\n"
    assert out.startswith("stateDiagram-v2\n")


def test_saga_graph_prints_dot_on_request() -> None:
    out, _ = run("saga_graph", "tests.ops.approval", "--format", "dot")

    assert out == render_dot(flow_registry.get("tests.ops.approval")) + "\n"


def test_saga_graph_without_a_type_draws_every_version_of_every_registered_flow_once() -> None:
    out, _ = run("saga_graph")

    assert out.count("stateDiagram-v2") == 1
    for definition in flow_registry.all():
        versions = flow_registry.versions(definition.saga_type)
        titles = (
            [definition.saga_type]
            if len(versions) == 1
            else [f"{d.saga_type} v{d.version}" for d in versions]
        )
        for title in titles:
            assert out.count(f'state "{title}" as ') == 1


def test_saga_graph_draws_each_declared_version_of_a_flow_in_its_own_box() -> None:
    out, _ = run("saga_graph", "tests.parcel")

    assert out == render(flow_registry.versions("tests.parcel"), "mermaid") + "\n"
    assert 'state "tests.parcel v1" as saga1 {' in out
    assert 'state "tests.parcel v2" as saga2 {' in out
    assert "saga1_step1 : 1 wait_for CollectionDue" in out
    assert "saga2_step1 : 1 wait_for ParcelWeighed" in out
    assert "%% tests.testapp.parcel_flows.ParcelFlowV1" in out


def test_saga_graph_in_dot_names_the_one_saga_type_its_versions_share() -> None:
    out, _ = run("saga_graph", "tests.parcel", "--format", "dot")

    assert out.startswith('digraph "tests.parcel" {')
    assert 'label="tests.parcel v1";' in out
    assert 'label="tests.parcel v2";' in out


def test_saga_graph_rejects_an_unknown_type_listing_the_known_ones() -> None:
    with pytest.raises(CommandError) as raised:
        run("saga_graph", "no.such.saga")

    message = str(raised.value)
    assert "Unknown saga type 'no.such.saga'" in message
    assert "quotes.follow-up" in message
    assert "tests.ops.reminder" in message


def test_saga_graph_rejects_an_unknown_format() -> None:
    with pytest.raises(CommandError, match="invalid choice: 'png'"):
        run("saga_graph", "--format", "png")
