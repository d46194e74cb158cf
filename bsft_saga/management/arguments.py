"""Validated command arguments, shared by every bsft_saga management command.

Each function takes an option's value as the command received it — a string from the
command line, or whatever a caller of ``call_command(..., option=value)`` passed (Django
hands keyword options to ``handle()`` unparsed) — and returns it typed and range-checked,
or raises ``CommandError`` naming the option. An out-of-range value never reaches the
database or ``datetime`` arithmetic, where it would end in a traceback (``OverflowError``,
``DataError``) instead of a message.

Use them at the top of ``handle()``::

    older_than = arguments.duration("--older-than", options["older_than"])
    ids = arguments.row_ids("--id", options["ids"])
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.core.management.base import CommandError
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from bsft_saga.db.datetimes import storable
from bsft_saga.events.codec import unstorable_text

__all__ = [
    "MAX_BATCH_SIZE",
    "MAX_DURATION",
    "MAX_ROW_ID",
    "batch_size",
    "duration",
    "moment",
    "parse_duration",
    "positive_int",
    "row_ids",
    "text",
    "uuids",
]

#: The longest accepted duration (about 1000 years): "now minus it" stays a valid datetime.
MAX_DURATION = timedelta(days=365_000)
#: The most rows one statement or pass may handle: one id per SQL parameter fits SQLite's
#: limit, and a pass stays well inside a claim lease.
MAX_BATCH_SIZE = 10_000
#: The largest primary key a ``BigAutoField`` can hold.
MAX_ROW_ID = 2**63 - 1

_DURATION = re.compile(r"(?P<count>\d+)(?P<unit>[smhdw])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION_FORMAT = "a whole number and one unit of s, m, h, d or w, e.g. 30d, 12h, 90m, 45s, 2w"


def parse_duration(value: str) -> timedelta:
    """``"30d"`` -> ``timedelta(days=30)``; units s, m, h, d, w.

    ``ValueError`` for anything else, and for a duration longer than ``MAX_DURATION``.
    """
    match = _DURATION.fullmatch(value.strip())
    if match is None:
        raise ValueError(f"{value!r} is not a duration; use {_DURATION_FORMAT}")
    seconds = int(match["count"]) * _UNIT_SECONDS[match["unit"]]
    if seconds > MAX_DURATION.total_seconds():
        raise ValueError(f"{value!r} is out of range; at most {MAX_DURATION.days}d")
    return timedelta(seconds=seconds)


def duration(option: str, value: str | timedelta) -> timedelta:
    """The value of a duration option (``"30d"``, or a ``timedelta`` from code)."""
    if isinstance(value, timedelta):
        if not timedelta(0) <= value <= MAX_DURATION:
            raise CommandError(
                f"{option}: {value} is out of range; from 0 to {MAX_DURATION.days} days"
            )
        return value
    if not isinstance(value, str):
        raise CommandError(f"{option}: expected a duration such as 30d, got {_kind(value)}")
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise CommandError(f"{option}: {exc}") from None


def positive_int(option: str, value: Any, *, maximum: int) -> int:
    """The value of an integer option from 1 to ``maximum``."""
    number = _integer(option, value)
    if number < 1:
        raise CommandError(f"{option} must be a positive integer, got {number}")
    if number > maximum:
        raise CommandError(f"{option} is out of range: at most {maximum}, got {number}")
    return number


def batch_size(option: str, value: Any) -> int:
    """The value of a batch-size option: 1 to ``MAX_BATCH_SIZE``."""
    return positive_int(option, value, maximum=MAX_BATCH_SIZE)


def row_ids(option: str, values: Iterable[Any]) -> list[int]:
    """The values of an option naming rows by integer primary key (1 to ``MAX_ROW_ID``)."""
    ids = []
    for value in _several(option, values):
        number = _integer(option, value)
        if not 1 <= number <= MAX_ROW_ID:
            raise CommandError(
                f"{option}: {number} is out of range; row ids run from 1 to {MAX_ROW_ID}"
            )
        ids.append(number)
    return ids


def uuids(option: str, values: Iterable[Any]) -> list[uuid.UUID]:
    """The values of an option naming rows by UUID primary key."""
    parsed = []
    for value in _several(option, values):
        if isinstance(value, uuid.UUID):
            parsed.append(value)
            continue
        try:
            parsed.append(uuid.UUID(str(value)))
        except ValueError:
            raise CommandError(f"{option}: {_shown(value)} is not a UUID") from None
    return parsed


def moment(option: str, value: str | datetime) -> datetime:
    """The value of a date-time option: ISO 8601 (naive: in ``TIME_ZONE``), aware, and
    within the dates bsft_saga stores (0001-01-02 to 9998-12-31 in UTC)."""
    if isinstance(value, str):
        try:
            parsed = parse_datetime(value.strip())
        except ValueError:  # well formed, but no such date (2026-02-30)
            parsed = None
        if parsed is None:
            raise CommandError(
                f"{option}: {_shown(value)} is not an ISO 8601 date-time, "
                "e.g. 2026-03-31T09:00:00+00:00"
            )
        value = parsed
    if not isinstance(value, datetime):
        raise CommandError(f"{option}: expected an ISO 8601 date-time, got {_kind(value)}")
    if timezone.is_naive(value):
        value = timezone.make_aware(value)
    try:
        return storable(value, field="the date-time", where=option)
    except ValueError as exc:
        raise CommandError(str(exc)) from None


def text(option: str, value: Any, *, max_length: int | None = None) -> str:
    """The value of a text argument that is stored or printed: no NUL character, no lone
    surrogate (PostgreSQL stores neither, and a terminal cannot print a surrogate), and at
    most ``max_length`` characters."""
    if not isinstance(value, str):
        raise CommandError(f"{option}: expected text, got {_kind(value)}")
    problem = unstorable_text(value)
    if problem is not None:
        raise CommandError(f"{option}: {problem.replace('str holds', 'the text holds', 1)}")
    if max_length is not None and len(value) > max_length:
        raise CommandError(
            f"{option} is {len(value)} characters long; at most {max_length} are stored"
        )
    return value


def _integer(option: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise CommandError(f"{option}: expected an integer, got {_kind(value)}")
    if isinstance(value, int):
        return value
    text = value.strip()
    if not re.fullmatch(r"[+-]?\d+", text):
        raise CommandError(f"{option}: {_shown(value)} is not an integer")
    try:
        return int(text)
    except ValueError:  # more digits than int() converts
        raise CommandError(f"{option}: {_shown(value)} is out of range") from None


def _several(option: str, values: Iterable[Any]) -> list[Any]:
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise CommandError(f"{option}: expected a list of values, got {_kind(values)}")
    return list(values)


def _kind(value: Any) -> str:
    return type(value).__name__


def _shown(value: Any) -> str:
    # Quoted, and cut short: an argument may be a pasted blob, and this lands in logs.
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
