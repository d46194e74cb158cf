"""``manage.py saga_history``: what happened to one key's sagas, from their journal."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from bsft_saga.db.datetimes import unreadable_fields
from bsft_saga.history import ENTRY_FIELDS, InstanceHistory, KeyHistory, key_history
from bsft_saga.management import arguments
from bsft_saga.management.keys import nothing_found
from bsft_saga.management.printable import printable
from bsft_saga.models import SagaInstance, SagaJournalEntry

#: Entries shown when ``--limit`` is not given.
DEFAULT_LIMIT = 50

#: What the header of an instance says of it.
INSTANCE_FIELDS = ("id", "is_complete", "step_index", "version", "created_at", "completed_at")


class Command(BaseCommand):
    help = (
        "Print the journal of the saga instances of SAGA_TYPE with the correlation key KEY: "
        "the active one and the finished ones the key had before it, newest instance first, "
        "each instance's entries newest first (what happened last is on top). An entry is a "
        "transition (started, advanced, handled, completed, expired), what became of a timer "
        "or an outbox row that moved no step (timer_fired, timer_missed, dead_lettered) or an "
        "operator action "
        "(terminated, fired_now, requeued, timer_canceled, timer_rescheduled), with its "
        "time, steps, version, event type, what delivered it (publish, timer, outbox, kept, "
        "operator) and who; never state or payload. Use '' as the key of a single-instance "
        "flow."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("saga_type", metavar="SAGA_TYPE", help="The flow's saga_type.")
        parser.add_argument("key", metavar="KEY", help="The correlation key.")
        parser.add_argument(
            "--format",
            choices=("text", "json"),
            default="text",
            help="text (default): a header per instance, then one line per entry; json: one "
            "JSON object with the instances and their entries, by field name.",
        )
        parser.add_argument(
            "--limit",
            default=DEFAULT_LIMIT,
            metavar="N",
            help=f"Show the newest N entries in all, and at most N instances (default "
            f"{DEFAULT_LIMIT}, at most {arguments.MAX_BATCH_SIZE}); the output says how many "
            "are left out.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        saga_type = arguments.text("SAGA_TYPE", options["saga_type"])
        key = arguments.text("KEY", options["key"])
        limit = arguments.positive_int(
            "--limit", options["limit"], maximum=arguments.MAX_BATCH_SIZE
        )
        history = key_history(saga_type, key, limit=limit)
        if not history.instances:
            raise CommandError(nothing_found(saga_type, key))
        if options["format"] == "json":
            self.stdout.write(json.dumps(_as_dict(history), indent=2))
        else:
            self.stdout.write(_as_text(history, verbosity=int(options["verbosity"])))


# --- JSON ---------------------------------------------------------------------------------


def _as_dict(history: KeyHistory) -> dict[str, Any]:
    return {
        "saga_type": history.saga_type,
        "correlation_key": history.correlation_key,
        "instances_total": history.instances_total,
        "instances": [_instance_dict(shown) for shown in history.instances],
    }


def _instance_dict(shown: InstanceHistory) -> dict[str, Any]:
    return {
        **_fields(shown.instance, INSTANCE_FIELDS),
        "entries_total": shown.total,
        "entries": [_fields(entry, ENTRY_FIELDS) for entry in shown.entries],
    }


def _fields(row: SagaInstance | SagaJournalEntry, names: tuple[str, ...]) -> dict[str, Any]:
    unreadable = unreadable_fields(row)
    data = {name: _json_value(None if name in unreadable else getattr(row, name)) for name in names}
    if unreadable:
        # As on every HTTP route: null, and the field named (bsft_saga.db.datetimes).
        data["unreadable_fields"] = list(unreadable)
    return data


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return timezone.localtime(value).isoformat()
    if value is None or isinstance(value, bool | int | str):
        return value
    return str(value)  # a UUID


# --- text ---------------------------------------------------------------------------------


def _as_text(history: KeyHistory, *, verbosity: int) -> str:
    lines: list[str] = []
    if verbosity >= 1:
        lines.append(
            f"{printable(history.saga_type)}[{printable(history.correlation_key)}]: "
            f"{_count(history.instances_total, 'instance', 'instances')}, newest first; "
            "entries newest first"
        )
    for shown in history.instances:
        if verbosity >= 1:
            lines += ["", _instance_line(shown)]
        lines += _entry_lines(shown.entries, verbosity=verbosity)
        left_out = shown.total - len(shown.entries)
        if verbosity >= 1 and left_out:
            lines.append(f"  ... {_left_out(left_out, 'older entry', 'older entries')}")
    left_out = history.instances_total - len(history.instances)
    if verbosity >= 1 and left_out:
        lines += ["", f"... {_left_out(left_out, 'older instance', 'older instances')}"]
    return "\n".join(lines)


def _instance_line(shown: InstanceHistory) -> str:
    instance = shown.instance
    where = "complete" if instance.is_complete else "active"
    line = (
        f"instance {instance.pk}  {where} at step {instance.step_index}, version "
        f"{instance.version}, started {_moment(instance.created_at)}"
    )
    if instance.completed_at is not None:
        line += f", completed {_moment(instance.completed_at)}"
    return f"{line}; {_count(shown.total, 'entry', 'entries')}"


def _entry_lines(entries: tuple[SagaJournalEntry, ...], *, verbosity: int) -> list[str]:
    if not entries:
        return ["  (no journal entries)"] if verbosity >= 1 else []
    columns = ["at", "kind", "step", "version", "via", "event", "correlation id"]
    if verbosity >= 2:
        columns.append("message id")
    rows = [_entry_cells(entry, verbosity=verbosity) for entry in entries]
    if verbosity >= 1:
        rows.insert(0, columns)
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    return [
        "  "
        + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def _entry_cells(entry: SagaJournalEntry, *, verbosity: int) -> list[str]:
    via = entry.via
    if entry.timer_name:
        via += f" {entry.timer_name}"
    if entry.user:
        via += f" by {entry.user}"
    cells = [
        _moment(entry.at),
        entry.kind,
        _steps(entry.step_before, entry.step_after),
        _number(entry.version),
        via,
        entry.event_type or "-",
        entry.correlation_id or "-",
    ]
    if verbosity >= 2:
        cells.append(str(entry.message_id or "-"))
    return [printable(cell) for cell in cells]  # stored text: never a raw control character


def _steps(before: int | None, after: int | None) -> str:
    """``1 -> 2``; a start, which enters its first step from none, ``-> 1`` (the admin's
    journal: ``→ step 1``)."""
    if before is None and after is not None:
        return f"-> {after}"
    return f"{_number(before)} -> {_number(after)}"


def _number(value: int | None) -> str:
    return "-" if value is None else str(value)


def _count(number: int, one: str, many: str) -> str:
    return f"{number} {one if number == 1 else many}"


def _left_out(number: int, one: str, many: str) -> str:
    return f"{_count(number, one, many)} not shown (raise --limit)"


def _moment(value: datetime | str) -> str:
    """ISO 8601 to the second, in the project's ``TIME_ZONE``, with its offset; an
    unreadable stored date as the text that says so."""
    if not isinstance(value, datetime):
        return value
    return timezone.localtime(value).isoformat(timespec="seconds")
