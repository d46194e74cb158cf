"""Command arguments out of range are a ``CommandError`` naming the argument, never a traceback.

Before the shared checks in ``bsft_saga.management.arguments``, these values reached
``timedelta`` arithmetic or the database and ended in ``OverflowError`` / ``DataError``.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

from bsft_saga.management import arguments

pytestmark = pytest.mark.django_db

HUGE = "99999999999999999999"


def run(*args: str, **options: Any) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO(), **options)
    return out.getvalue()


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (("purge_saga_timeouts", "--older-than", "99999999999w"), "--older-than"),
        (("purge_saga_timeouts", "--older-than", "365001d"), "--older-than"),
        (("purge_saga_timeouts", "--older-than", "30d", "--batch-size", HUGE), "--batch-size"),
        (("requeue_saga_timeouts", "--id", HUGE), "--id"),
        (("requeue_saga_timeouts", "--id", "1", str(2**63)), "--id"),
        (("requeue_saga_timeouts", "--id", "0"), "--id"),
        (("drain_saga_timeouts", "--batch-size", HUGE), "--batch-size"),
        (("drain_saga_timeouts", "--batch-size", str(arguments.MAX_BATCH_SIZE + 1)), "--batch"),
    ],
    ids=lambda value: " ".join(value)[:60] if isinstance(value, tuple) else value,
)
def test_an_out_of_range_argument_is_a_command_error_naming_it(
    args: tuple[str, ...], option: str
) -> None:
    with pytest.raises(CommandError, match=f"^{option}") as raised:
        run(*args)

    assert "range" in str(raised.value) or "positive" in str(raised.value)


@pytest.mark.parametrize(
    ("command", "options", "option"),
    [
        ("drain_saga_timeouts", {"batch_size": 10**20}, "--batch-size"),
        ("purge_saga_timeouts", {"older_than": timedelta(days=10**6)}, "--older-than"),
        ("purge_saga_timeouts", {"older_than": "30d", "batch_size": 10**20}, "--batch-size"),
        ("requeue_saga_timeouts", {"ids": [10**20]}, "--id"),
    ],
    ids=["drain-batch", "purge-window", "purge-batch", "requeue-id"],
)
def test_values_passed_from_code_are_checked_the_same_way(
    command: str, options: dict[str, Any], option: str
) -> None:
    # call_command(..., option=value) hands values to handle() without parsing them.
    with pytest.raises(CommandError, match=f"^{option}"):
        run(command, **options)


def test_the_largest_values_in_range_are_accepted() -> None:
    assert run("drain_saga_timeouts", "--batch-size", str(arguments.MAX_BATCH_SIZE))
    assert "Would delete 0" in run(
        "purge_saga_timeouts", "--older-than", f"{arguments.MAX_DURATION.days}d", "--dry-run"
    )
    # The largest id a BigAutoField holds reaches the database and is refused as unknown.
    with pytest.raises(CommandError, match=rf"not requeued: {arguments.MAX_ROW_ID}$"):
        run("requeue_saga_timeouts", "--id", str(arguments.MAX_ROW_ID))


def test_a_timedelta_duration_from_code_is_accepted() -> None:
    assert "Would delete 0" in run(
        "purge_saga_timeouts", older_than=timedelta(days=30), dry_run=True
    )


@pytest.mark.parametrize("value", ["1.5", "ten", "", "0x10"])
def test_a_non_integer_from_code_is_a_command_error_naming_the_option(value: str) -> None:
    with pytest.raises(CommandError, match=r"^--id: .* is not an integer"):
        arguments.row_ids("--id", [value])


def test_uuids_parses_strings_and_keeps_uuids() -> None:
    known = uuid.uuid4()

    assert arguments.uuids("--id", [str(known), known]) == [known, known]


def test_a_malformed_uuid_is_a_command_error_naming_the_option() -> None:
    with pytest.raises(CommandError, match=r"^--id: 'not-a-uuid' is not a UUID"):
        arguments.uuids("--id", ["not-a-uuid"])


def test_a_long_bad_value_is_cut_short_in_the_message() -> None:
    with pytest.raises(CommandError) as raised:
        arguments.uuids("--id", ["x" * 500])

    assert len(str(raised.value)) < 80


def test_a_negative_duration_from_code_is_out_of_range() -> None:
    with pytest.raises(CommandError, match=r"^--older-than: .* out of range"):
        arguments.duration("--older-than", timedelta(seconds=-1))


def test_the_error_the_docs_show_is_the_real_one() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "operations" / "commands.md").read_text()
    with pytest.raises(CommandError) as raised:
        run("requeue_saga_timeouts", "--id", HUGE)

    assert f"CommandError: {raised.value}\n" in docs


# --- text that cannot be stored or printed, dates beyond the stored range -------------------

LONE_SURROGATE = "x\udc80y"  # what the shell hands Python for bytes that are not UTF-8


@pytest.mark.parametrize(
    ("args", "argument"),
    [
        (("erase_saga_data", f"tests.ops{LONE_SURROGATE}", "k"), "SAGA_TYPE"),
        (("erase_saga_data", "tests.ops.reminder", LONE_SURROGATE), "KEY"),
        (("erase_saga_data", "tests.ops.reminder", "a\x00b"), "KEY"),
        (("terminate_saga", str(uuid.uuid4()), "--reason", f"fraud {LONE_SURROGATE}"), "--reason"),
        (("terminate_saga", str(uuid.uuid4()), "--reason", "nul \x00 in it"), "--reason"),
        (("terminate_saga", LONE_SURROGATE, "--reason", "wrong id"), "ID"),
    ],
    ids=["erase-type", "erase-key", "erase-nul", "reason", "reason-nul", "terminate-id"],
)
def test_text_that_cannot_be_stored_or_printed_is_a_command_error_naming_it(
    args: tuple[str, ...], argument: str
) -> None:
    with pytest.raises(CommandError, match=f"^{argument}: the text holds a NUL character"):
        run(*args)


@override_settings(DEBUG=True)
@pytest.mark.parametrize(
    "value",
    ["9999-12-31T23:59:59", "9999-12-31T23:00:00-15:00", "0001-01-01T00:00:00+01:00"],
)
def test_an_as_of_beyond_the_stored_range_is_a_command_error_naming_it(value: str) -> None:
    with pytest.raises(CommandError, match=r"^--as-of: the date-time .* is out of range"):
        run("drain_saga_timeouts", "--as-of", value)


def test_a_date_time_at_the_end_of_the_range_is_accepted() -> None:
    moment = arguments.moment("--as-of", "9998-12-31T23:59:59+00:00")

    assert (moment.year, moment.utcoffset()) == (9998, timedelta(0))
