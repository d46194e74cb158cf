"""``manage.py saga_history SAGA_TYPE KEY``: the journal of one key's instances, for people
(text) and scripts (JSON)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings
from freezegun import freeze_time

from bsft_saga import publish
from bsft_saga.history import ENTRY_FIELDS
from bsft_saga.models import JournalKind, SagaInstance, SagaJournalEntry
from bsft_saga.timeouts import drain_due
from tests.db.test_datetimes import store_unreadable
from tests.support.journal_rows import (
    advanced_by_timer,
    entry,
    shown_timer_canceled_by,
    timer_canceled_by,
)
from tests.testapp.ops_events import QuoteSent
from tests.testapp.ops_flows import REMINDER_SAGA_TYPE, QuoteFollowUpFlow, make_saga

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
DOCS = Path(__file__).resolve().parents[2] / "docs" / "operations" / "saga-history.md"


def run(*args: str, **options: Any) -> str:
    out = StringIO()
    call_command("saga_history", *args, stdout=out, **options)
    return out.getvalue()


def history_json(*args: str, **options: Any) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(run(*args, "--format", "json", **options))
    return document


@pytest.fixture
def two_instances() -> dict[str, SagaInstance]:
    """Key k-1: an instance that ran T0..T0+1d and completed, then the active one from T0+2d,
    advanced by its timer at T0+4d."""
    old = make_saga("k-1", complete=True, now=T0)
    SagaInstance.objects.filter(pk=old.pk).update(
        completed_at=T0 + timedelta(days=1), step_index=2, version=2
    )
    entry(old, JournalKind.STARTED, T0, step_after=1, correlation_id="req-1")
    entry(old, JournalKind.COMPLETED, T0 + timedelta(days=1), step_before=1, step_after=2)
    new = make_saga("k-1", now=T0 + timedelta(days=2))
    entry(new, JournalKind.STARTED, T0 + timedelta(days=2), step_after=1)
    advanced_by_timer(new, T0 + timedelta(days=4))
    timer_canceled_by(new, T0 + timedelta(days=5), "alice")
    old.refresh_from_db()
    new.refresh_from_db()
    return {"old": old, "new": new}


def entry_lines(output: str) -> list[str]:
    return [line.strip() for line in output.splitlines() if line.startswith("  2026-")]


# --- text ---------------------------------------------------------------------------------


def test_text_lists_the_newest_instance_first_and_each_journal_newest_first(
    two_instances: dict[str, SagaInstance],
) -> None:
    output = run(REMINDER_SAGA_TYPE, "k-1")

    lines = output.splitlines()
    assert lines[0] == (
        f"{REMINDER_SAGA_TYPE}[k-1]: 2 instances, newest first; entries newest first"
    )
    headers = [line for line in lines if line.startswith("instance ")]
    assert headers == [
        f"instance {two_instances['new'].pk}  active at step 1, version 1, started "
        "2026-03-04T08:00:00+00:00; 3 entries",
        f"instance {two_instances['old'].pk}  complete at step 2, version 2, started "
        "2026-03-02T08:00:00+00:00, completed 2026-03-03T08:00:00+00:00; 2 entries",
    ]
    assert [line.split()[:2] for line in entry_lines(output)] == [
        ["2026-03-07T08:00:00+00:00", "timer_canceled"],
        ["2026-03-06T08:00:00+00:00", "advanced"],
        ["2026-03-04T08:00:00+00:00", "started"],
        ["2026-03-03T08:00:00+00:00", "completed"],
        ["2026-03-02T08:00:00+00:00", "started"],
    ]


def test_a_text_line_says_steps_version_what_delivered_it_who_and_the_correlation_id(
    two_instances: dict[str, SagaInstance],
) -> None:
    output = run(REMINDER_SAGA_TYPE, "k-1")

    [column_names, *_] = [line.split("  ") for line in output.splitlines() if "  at  " in line]
    assert [name.strip() for name in column_names if name.strip()] == [
        "at",
        "kind",
        "step",
        "version",
        "via",
        "event",
        "correlation id",
    ]
    canceled, advanced, _, _, started = (line.split() for line in entry_lines(output))
    assert canceled == [
        *("2026-03-07T08:00:00+00:00", "timer_canceled", "2", "->", "2", "-"),
        *("operator", "escalate", "by", "alice", "-", "-"),
    ]
    assert advanced == [
        *("2026-03-06T08:00:00+00:00", "advanced", "1", "->", "2", "2"),
        *("timer", "remind", "tests.ops.advanced", "-"),
    ]
    assert started == [
        *("2026-03-02T08:00:00+00:00", "started", "->", "1", "1"),
        *("publish", "tests.ops.started", "req-1"),
    ]


@override_settings(TIME_ZONE="Europe/Berlin")
def test_times_are_shown_to_the_second_in_the_projects_time_zone_with_its_offset() -> None:
    saga = make_saga("tz", now=T0)
    entry(saga, JournalKind.STARTED, T0 + timedelta(microseconds=250), step_after=1)
    entry(saga, JournalKind.ADVANCED, datetime(2026, 7, 1, 12, 0, 5, tzinfo=UTC), step_after=2)

    assert [line.split()[0] for line in entry_lines(run(REMINDER_SAGA_TYPE, "tz"))] == [
        "2026-07-01T14:00:05+02:00",
        "2026-03-02T09:00:00+01:00",
    ]


def test_verbosity_2_adds_the_message_id_and_0_prints_the_entries_alone() -> None:
    saga = make_saga("v", now=T0)
    started = entry(saga, JournalKind.STARTED, T0, step_after=1)

    assert (
        run(REMINDER_SAGA_TYPE, "v", verbosity=2).splitlines()[-1].endswith(str(started.message_id))
    )
    quiet = run(REMINDER_SAGA_TYPE, "v", verbosity=0).splitlines()
    assert [line.split()[:2] for line in quiet] == [["2026-03-02T08:00:00+00:00", "started"]]


def test_an_instance_without_entries_is_listed_as_such() -> None:
    make_saga("before-the-journal", now=T0)

    output = run(REMINDER_SAGA_TYPE, "before-the-journal")

    assert "; 0 entries" in output
    assert output.splitlines()[-1] == "  (no journal entries)"


def test_an_entry_whose_time_cannot_be_read_is_shown_as_such() -> None:
    saga = make_saga("far", now=T0)
    started = entry(saga, JournalKind.STARTED, T0, step_after=1)
    store_unreadable(SagaJournalEntry, started.pk, "at")

    [*_, line] = run(REMINDER_SAGA_TYPE, "far").splitlines()
    assert line.startswith("  unreadable, stored as 10000-01-01")
    assert " started " in line
    [shown] = history_json(REMINDER_SAGA_TYPE, "far")["instances"][0]["entries"]
    assert (shown["at"], shown["unreadable_fields"]) == (None, ["at"])


# --- --limit -------------------------------------------------------------------------------


def test_limit_keeps_the_newest_entries_and_says_how_many_are_left_out(
    two_instances: dict[str, SagaInstance],
) -> None:
    output = run(REMINDER_SAGA_TYPE, "k-1", "--limit", "2")

    assert [line.split()[1] for line in entry_lines(output)] == ["timer_canceled", "advanced"]
    assert "  ... 1 older entry not shown (raise --limit)" in output.splitlines()
    assert output.splitlines()[-1] == "... 1 older instance not shown (raise --limit)"


def test_limit_runs_on_into_the_older_instance() -> None:
    old = make_saga("k", complete=True, now=T0)
    for hours in range(3):
        entry(old, JournalKind.HANDLED, T0 + timedelta(hours=hours))
    new = make_saga("k", now=T0 + timedelta(days=1))
    entry(new, JournalKind.STARTED, T0 + timedelta(days=1), step_after=1)

    document = history_json(REMINDER_SAGA_TYPE, "k", limit=3)

    assert [len(shown["entries"]) for shown in document["instances"]] == [1, 2]
    assert [shown["entries_total"] for shown in document["instances"]] == [1, 3]
    assert document["instances"][1]["entries"][0]["at"] == "2026-03-02T10:00:00+00:00"


def test_limit_caps_the_instances_too() -> None:
    for day in range(4):
        make_saga("many", complete=day < 3, now=T0 + timedelta(days=day))

    document = history_json(REMINDER_SAGA_TYPE, "many", "--limit", "2")

    assert (len(document["instances"]), document["instances_total"]) == (2, 4)
    assert "... 2 older instances not shown (raise --limit)" in run(
        REMINDER_SAGA_TYPE, "many", "--limit", "2"
    )


@pytest.mark.parametrize(
    ("limit", "message"),
    [
        ("0", "--limit must be a positive integer, got 0"),
        ("ten", "--limit: 'ten' is not an integer"),
        ("10001", "--limit is out of range: at most 10000, got 10001"),
    ],
)
def test_a_limit_out_of_range_is_an_error_naming_it(limit: str, message: str) -> None:
    make_saga("k", now=T0)

    with pytest.raises(CommandError) as error:
        run(REMINDER_SAGA_TYPE, "k", "--limit", limit)

    assert str(error.value) == message


# --- JSON ----------------------------------------------------------------------------------


def test_json_holds_the_instances_and_their_entries_by_field_name(
    two_instances: dict[str, SagaInstance],
) -> None:
    document = history_json(REMINDER_SAGA_TYPE, "k-1")

    assert {key: document[key] for key in ("saga_type", "correlation_key", "instances_total")} == {
        "saga_type": REMINDER_SAGA_TYPE,
        "correlation_key": "k-1",
        "instances_total": 2,
    }
    new, old = document["instances"]
    assert (new["id"], old["id"]) == (str(two_instances["new"].pk), str(two_instances["old"].pk))
    assert {key: old[key] for key in old if key != "entries"} == {
        "id": str(two_instances["old"].pk),
        "is_complete": True,
        "step_index": 2,
        "version": 2,
        "created_at": "2026-03-02T08:00:00+00:00",
        "completed_at": "2026-03-03T08:00:00+00:00",
        "entries_total": 2,
    }
    assert [row["kind"] for row in new["entries"]] == ["timer_canceled", "advanced", "started"]
    assert new["entries"][0] == shown_timer_canceled_by("alice", "2026-03-07T08:00:00+00:00")
    assert all(list(row) == list(ENTRY_FIELDS) for row in new["entries"] + old["entries"])


def test_json_shows_no_state_and_no_payload(two_instances: dict[str, SagaInstance]) -> None:
    text = run(REMINDER_SAGA_TYPE, "k-1", "--format", "json")

    assert '"state"' not in text
    assert '"payload"' not in text
    assert "reminded" not in text  # the instance's state holds {"reminded": false}


# --- errors --------------------------------------------------------------------------------


def test_an_unknown_saga_type_is_an_error_listing_the_installed_ones() -> None:
    with pytest.raises(CommandError) as error:
        run("tests.ops.remindr", "k")

    message = str(error.value)
    assert message.startswith("unknown saga type 'tests.ops.remindr'; installed saga types: ")
    assert REMINDER_SAGA_TYPE in message.split("installed saga types: ")[1].split(", ")


def test_an_unknown_key_is_an_error_naming_the_saga_type_and_the_key() -> None:
    make_saga("k", now=T0)

    with pytest.raises(CommandError) as error:
        run(REMINDER_SAGA_TYPE, "k-404")

    assert str(error.value) == f"no instance of {REMINDER_SAGA_TYPE!r} has the key 'k-404'"


def test_the_instances_of_a_flow_no_longer_installed_still_have_their_history() -> None:
    saga = make_saga("k", saga_type="tests.ops.retired-flow", complete=True, now=T0)
    entry(saga, JournalKind.STARTED, T0, step_after=1)

    assert [line.split()[1] for line in entry_lines(run("tests.ops.retired-flow", "k"))] == [
        "started"
    ]
    with pytest.raises(
        CommandError, match=r"no instance of 'tests\.ops\.retired-flow' has the key"
    ):
        run("tests.ops.retired-flow", "other")


def test_a_key_holding_a_nul_character_is_refused_by_name() -> None:
    with pytest.raises(CommandError, match=r"^KEY: "):
        run(REMINDER_SAGA_TYPE, "k\x00")


def test_the_empty_key_of_a_single_instance_flow_is_a_key_like_any_other() -> None:
    saga = make_saga("", now=T0)
    entry(saga, JournalKind.STARTED, T0, step_after=1)

    assert run(REMINDER_SAGA_TYPE, "").splitlines()[0].startswith(f"{REMINDER_SAGA_TYPE}[]: ")


# --- a real flow, and the example of docs/operations/saga-history.md --------------------------


def follow_up_quote(key: str) -> SagaInstance:
    """docs/operations/saga-history.md's quote: sent at T0, followed up by its timer two days
    later."""
    with freeze_time(T0):
        publish(QuoteSent(key), correlation_id="req-7f3a")
    with freeze_time(T0 + timedelta(days=2, seconds=1)):
        assert drain_due().fired == 1
    return SagaInstance.objects.get(saga_type=QuoteFollowUpFlow.saga_type, correlation_key=key)


def test_a_published_start_and_a_fired_timer_show_as_started_then_advanced() -> None:
    saga = follow_up_quote("q-1")

    [shown] = history_json(QuoteFollowUpFlow.saga_type, "q-1")["instances"]

    assert shown["id"] == str(saga.pk)
    assert [
        (e["kind"], e["via"], e["timer_name"], e["step_before"], e["step_after"], e["version"])
        for e in shown["entries"]
    ] == [("advanced", "timer", "followup", 1, 2, 2), ("started", "publish", "", None, 1, 1)]
    assert [e["event_type"] for e in shown["entries"]] == [
        "tests.ops.quote-follow-up-due",
        "tests.ops.quote-sent",
    ]
    assert {e["correlation_id"] for e in shown["entries"]} == {"req-7f3a"}


def _cells(text: str) -> list[list[str]]:
    return [re.split(r"\s{2,}", line.strip()) for line in text.splitlines()]


def test_the_docs_example_is_what_the_command_prints() -> None:
    [block] = [
        block
        for block in re.findall(r"^```console\n(.*?)^```", DOCS.read_text(), flags=re.S | re.M)
        if "$ python manage.py saga_history " in block
    ]
    command, *documented = block.splitlines()
    saga = follow_up_quote("q-4711")
    printed = (
        run(*command.removeprefix("$ python manage.py saga_history ").split())
        .replace(str(saga.pk), "3f0c9a52-5d0e-4c55-9b1c-0f6f3e5f2a11")
        .replace("tests.ops.quote-", "quotes.")
    )

    assert _cells(printed) == _cells("\n".join(documented))
