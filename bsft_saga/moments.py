"""How bsft_saga writes a moment for people: to the second, in the current time zone, naming
the zone (``2026-12-01 14:20:05 CET``).

One format for every page and title that shows a moment (the admin, a timer's name in a
title, the flow's picture), so that a lease, a retry or a due time reads the same wherever
it is shown. Scripts get ISO 8601 instead (the HTTP API, ``--format json``).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone

__all__ = ["EMPTY", "format_moment"]

#: What is shown for no moment at all (the admin's ``empty_value_display``).
EMPTY = "-"


def format_moment(value: datetime | str | None, empty: str = EMPTY) -> str:
    """``value`` in the current time zone, to the second, with the zone's abbreviation
    (``2026-12-01 14:20:05 CET``) or, for a zone that has none, its offset
    (``2026-12-01 17:20:05 +04:00``); ``empty`` for ``None``.

    A string is shown as it is: that is how a date stored out of range reaches a page
    (:class:`bsft_saga.db.datetimes.Unreadable`). A naive datetime (only with ``USE_TZ =
    False``, which the system checks refuse) is shown without a zone. Microseconds are
    cut, not rounded: the second shown has begun.
    """
    if value is None:
        return empty
    if not isinstance(value, datetime):
        return str(value)
    if timezone.is_naive(value):
        return _wall_clock(value)
    local = timezone.localtime(value)
    return f"{_wall_clock(local)} {_zone(local)}"


def _wall_clock(value: datetime) -> str:
    # isoformat, not strftime: strftime("%Y") writes year 1 as "1", not "0001".
    return value.replace(tzinfo=None).isoformat(sep=" ", timespec="seconds")


def _zone(local: datetime) -> str:
    name = local.tzname() or ""
    if name and name[0] not in "+-":
        return name
    # Zones without an abbreviation name themselves by their offset ("+04"): always hh:mm.
    offset = local.utcoffset() or timedelta(0)
    sign = "-" if offset < timedelta(0) else "+"
    minutes = abs(offset) // timedelta(minutes=1)
    return f"{sign}{minutes // 60:02d}:{minutes % 60:02d}"
