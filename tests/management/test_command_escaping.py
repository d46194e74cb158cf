"""Commands print stored text with its control characters escaped (``\\x1b``, ``\\r``,
``\\n``), never raw: a key, a correlation id, an event type, a timer name, a user name or a
host name holding an escape sequence or a line break can neither rewrite the operator's
terminal nor forge a line of output. JSON output keeps the exact text."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from freezegun import freeze_time

from bsft_saga.management.printable import printable
from bsft_saga.models import JournalKind, SagaDispatcher, TimeoutOutcome
from tests.support.journal_rows import entry, timer_canceled_by
from tests.testapp.ops_flows import REMINDER_SAGA_TYPE, make_saga, make_timer

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)

KEY = "k\x1b[2J\r\nforged: key"
CORRELATION_ID = "req\x1b]0;pwned\x07"
EVENT_TYPE = "tests.ops.started\nforged: event"
TIMER_NAME = "escalate\rforged: timer"
USER = "mallory\x1b[31m"


def run(command: str, *args: str, **options: Any) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(command, *args, stdout=out, stderr=err, **options)
    return out.getvalue(), err.getvalue()


def assert_no_raw_control_character(output: str) -> None:
    assert all(char == "\n" or char.isprintable() for char in output), repr(output)
    assert "forged" not in "".join(line[:8] for line in output.splitlines())


@pytest.fixture
def hostile_saga() -> Any:
    saga = make_saga(KEY, now=T0)
    entry(
        saga,
        JournalKind.STARTED,
        T0,
        step_after=1,
        correlation_id=CORRELATION_ID,
        event_type=EVENT_TYPE,
    )
    timer_canceled_by(saga, T0 + timedelta(hours=1), USER, timer_name=TIMER_NAME)
    return saga


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain key-1", "plain key-1"),
        ("a\x1b[2Jb", "a\\x1b[2Jb"),
        ("x\r\ny\tz", "x\\r\\ny\\tz"),
        ("\x00\x7f\x85", "\\x00\\x7f\\x85"),
        ("right\u202eleft\u2028", "right\\u202eleft\\u2028"),
        ("Zoë, Ørsted 👍", "Zoë, Ørsted 👍"),
        ("a\\x1b", "a\\x1b"),  # a backslash stays itself
    ],
)
def test_printable_escapes_control_format_and_separator_characters_only(
    text: str, shown: str
) -> None:
    assert printable(text) == shown


def test_saga_history_text_prints_control_characters_escaped(hostile_saga: Any) -> None:
    output, _ = run("saga_history", REMINDER_SAGA_TYPE, KEY, verbosity=2)

    assert_no_raw_control_character(output)
    assert f"{REMINDER_SAGA_TYPE}[k\\x1b[2J\\r\\nforged: key]: 1 instance" in output
    for escaped in (
        "req\\x1b]0;pwned\\x07",
        "tests.ops.started\\nforged: event",
        "operator escalate\\rforged: timer by mallory\\x1b[31m",
    ):
        assert escaped in output


def test_saga_history_json_keeps_the_exact_text(hostile_saga: Any) -> None:
    output, _ = run("saga_history", REMINDER_SAGA_TYPE, KEY, "--format", "json")

    document = json.loads(output)
    assert document["correlation_key"] == KEY
    canceled, started = document["instances"][0]["entries"]
    assert (started["correlation_id"], started["event_type"]) == (CORRELATION_ID, EVENT_TYPE)
    assert (canceled["timer_name"], canceled["user"]) == (TIMER_NAME, USER)


def test_saga_status_prints_a_dispatchers_host_escaped() -> None:
    with freeze_time(T0):
        SagaDispatcher.objects.create(
            host="worker\x1b[2J\r\nforged: host",
            pid=7,
            kind="loop",
            started_at=T0 - timedelta(hours=1),
            last_pass_at=T0 - timedelta(seconds=1),
        )
        output, _ = run("saga_status")

    assert_no_raw_control_character(output)
    assert "loop worker\\x1b[2J\\r\\nforged: host:7" in output


def test_terminate_saga_prints_a_refused_sagas_key_escaped() -> None:
    saga = make_saga(KEY, complete=True, now=T0)

    err = StringIO()
    with pytest.raises(CommandError):
        call_command(
            "terminate_saga", str(saga.pk), "--reason", "cleanup", stdout=StringIO(), stderr=err
        )

    assert_no_raw_control_character(err.getvalue())
    assert "[k\\x1b[2J\\r\\nforged: key] (" in err.getvalue()


def test_cancel_and_reschedule_print_a_refused_timers_saga_key_escaped() -> None:
    with freeze_time(T0):
        timer = make_timer(make_saga(KEY), outcome=TimeoutOutcome.FIRED)
        err = StringIO()
        with pytest.raises(CommandError):
            call_command("cancel_saga_timeouts", str(timer.pk), stdout=StringIO(), stderr=err)
        with pytest.raises(CommandError) as rescheduled:
            call_command(
                "reschedule_saga_timeout",
                str(timer.pk),
                "--to",
                "2026-03-03T08:00:00+00:00",
                stdout=StringIO(),
            )

    for output in (err.getvalue(), str(rescheduled.value)):
        assert_no_raw_control_character(output)
        assert "[k\\x1b[2J\\r\\nforged: key] is not pending" in output


def test_erase_saga_data_prints_the_key_it_was_given_escaped() -> None:
    make_saga(KEY, complete=True, now=T0)

    output, _ = run("erase_saga_data", REMINDER_SAGA_TYPE, KEY, "--dry-run")

    assert_no_raw_control_character(output)
    assert (
        f"Would erase 1 instance(s) of {REMINDER_SAGA_TYPE}[k\\x1b[2J\\r\\nforged: key]." in output
    )


def test_requeue_prints_a_refused_timers_saga_key_escaped() -> None:
    with freeze_time(T0):
        timer = make_timer(make_saga(KEY), name=TIMER_NAME, outcome=TimeoutOutcome.FIRED)
        err = StringIO()
        with pytest.raises(CommandError):
            call_command(
                "requeue_saga_timeouts", "--id", str(timer.pk), stdout=StringIO(), stderr=err
            )

    assert_no_raw_control_character(err.getvalue())
    assert "[k\\x1b[2J\\r\\nforged: key] is not dead-lettered" in err.getvalue()
