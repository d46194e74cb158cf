"""Business calendars: count a timer's delay in working days of a time zone.

A calendar is named in ``BSFT_SAGA["CALENDARS"]`` and passed by that name to
``ctx.schedule_timeout(..., calendar="berlin")``. :func:`get_calendar` builds the named
backend (any object satisfying :class:`BusinessCalendar`); :class:`WeekdayBusinessCalendar`
is the one bsft_saga ships, using the ``holidays`` package for public holidays.

Nothing in this module reads settings at import time, and calendars are pure: ``add()``
never reads the clock.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from copy import deepcopy
from datetime import UTC, date, datetime, timedelta
from typing import Any, Protocol, runtime_checkable
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import holidays
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from bsft_saga.conf import SETTING_NAME, saga_settings
from bsft_saga.exceptions import SagaError

__all__ = [
    "MAX_BUSINESS_DAYS",
    "BusinessCalendar",
    "UnknownCalendar",
    "WeekdayBusinessCalendar",
    "check_calendars",
    "get_calendar",
]

_SETTING_PATH = f'{SETTING_NAME}["CALENDARS"]'

# A calendar whose weekend and holidays leave no business day within this many
# consecutive days is treated as broken rather than looped over forever.
_MAX_CLOSED_DAYS = 3660

#: The most business days one delay may count (about 140 years of five-day weeks): each is
#: a step of a loop, and the result must stay a date bsft_saga stores. A longer delay is a
#: ``ValueError`` at once (3,000,000 days would loop for seconds, then overflow).
MAX_BUSINESS_DAYS = 36_500


@runtime_checkable
class BusinessCalendar(Protocol):
    """What a calendar backend provides; any class with these two methods qualifies.

    Backends must be safe to share between threads: :func:`get_calendar` builds one
    instance per configured key and hands it to every caller.
    """

    def add(self, start: datetime, delay: timedelta) -> datetime:
        """Return ``start`` moved forward by ``delay`` counted in this calendar.

        ``start`` is aware (a naive one is a ``ValueError``), ``delay`` is not negative
        (a negative one is a ``ValueError``); the result is an aware UTC datetime.
        """
        ...

    def is_business_day(self, day: date) -> bool:
        """Return whether the local calendar date ``day`` is a working day."""
        ...


class UnknownCalendar(SagaError, LookupError):
    """A calendar key that ``BSFT_SAGA["CALENDARS"]`` does not configure."""

    def __init__(self, key: str, configured: Iterable[str]) -> None:
        self.key = key
        self.configured = tuple(sorted(configured))
        known = ", ".join(repr(k) for k in self.configured) or "none"
        super().__init__(
            f"Unknown calendar {key!r}: {_SETTING_PATH} has no such key "
            f"(configured calendars: {known})."
        )


class WeekdayBusinessCalendar:
    """Working days are the weekdays outside ``weekend`` that are not public holidays.

    Options (all keyword-only, as in ``BSFT_SAGA["CALENDARS"][key]["OPTIONS"]``):

    - ``country``: ISO 3166 code understood by ``holidays.country_holidays`` (``"DE"``);
      ``None`` means no public holidays.
    - ``subdiv``: that country's subdivision (``"BE"`` for Berlin); needs ``country``.
    - ``timezone``: IANA zone name whose wall clock and dates the calendar counts in.
    - ``weekend``: weekday numbers that are never working days (Monday is 0, Sunday 6).
    - ``extra_holidays``: further closed dates, as ``date`` objects or ISO strings.

    A bad option is a ``ValueError`` whose message names it. Instances are immutable and
    thread-safe.
    """

    def __init__(
        self,
        *,
        country: str | None = None,
        subdiv: str | None = None,
        timezone: str = "UTC",
        weekend: Iterable[int] = (5, 6),
        extra_holidays: Iterable[date | str] = (),
    ) -> None:
        self.tz = _zone(timezone)
        self.country = country
        self.subdiv = subdiv
        self.weekend = _weekend(weekend)
        self.extra_holidays = _extra_holidays(extra_holidays)
        self._holidays = _country_holidays(country, subdiv)
        # holidays' HolidayBase fills in years lazily on lookup, mutating itself; the lock
        # keeps two threads from populating the same year at once.
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(country={self.country!r}, subdiv={self.subdiv!r}, "
            f"timezone={self.tz.key!r}, weekend={tuple(sorted(self.weekend))!r})"
        )

    def is_business_day(self, day: date) -> bool:
        """Return whether the local date ``day`` is neither weekend nor holiday.

        ``day`` is a date in the calendar's own time zone. A ``datetime`` is a
        ``TypeError``: which local date it falls on depends on the zone, so convert it
        first (``dt.astimezone(calendar.tz).date()``).
        """
        if isinstance(day, datetime):
            raise TypeError(
                "is_business_day() takes a date, not a datetime; "
                "convert it with .astimezone(calendar.tz).date() first"
            )
        if day.weekday() in self.weekend or day in self.extra_holidays:
            return False
        if self._holidays is None:
            return True
        with self._lock:
            return day not in self._holidays

    def add(self, start: datetime, delay: timedelta) -> datetime:
        """Return ``start`` plus ``delay``, with whole days counted as business days.

        ``start`` is converted to the calendar's zone. Each whole day of ``delay`` moves
        to the next business day, keeping the local wall-clock time (so a delay across
        a DST change is not a multiple of 24 hours). The rest of ``delay`` is then added
        in local wall time; if that lands on a non-business day, the result moves forward
        to the next business day at the same local time. A local time that does not
        exist or exists twice (DST) is resolved with ``fold=0``: the offset in force
        before the change, normalised through UTC.

        A zero delay returns ``start`` unchanged (in UTC), even on a non-business day.
        A naive ``start``, a negative ``delay``, a delay of more than
        ``MAX_BUSINESS_DAYS`` days, or one whose end lies beyond year 9999 is a
        ``ValueError``. The result is an aware datetime in UTC.
        """
        if start.tzinfo is None or start.utcoffset() is None:
            raise ValueError(f"start must be an aware datetime, got naive {start!r}")
        if delay < timedelta(0):
            raise ValueError(f"delay must not be negative, got {delay!r}")
        if delay.days > MAX_BUSINESS_DAYS:
            raise ValueError(
                f"a delay counts at most {MAX_BUSINESS_DAYS} business days, got {delay.days}"
            )
        if not delay:
            return start.astimezone(UTC)
        try:
            return self._add(start, delay)
        except OverflowError:
            raise ValueError(
                f"{start} plus {delay.days} business days is after year 9999"
            ) from None

    def _add(self, start: datetime, delay: timedelta) -> datetime:
        local = start.astimezone(self.tz)
        day = local.date()
        for _ in range(delay.days):
            day = self._next_business_day(day)
        wall = datetime.combine(day, local.time()) + (delay - timedelta(days=delay.days))
        if not self.is_business_day(wall.date()):
            wall = datetime.combine(self._next_business_day(wall.date()), wall.time())
        return wall.replace(tzinfo=self.tz, fold=0).astimezone(UTC)

    def _next_business_day(self, after: date) -> date:
        day = after
        for _ in range(_MAX_CLOSED_DAYS):
            day += timedelta(days=1)
            if self.is_business_day(day):
                return day
        raise ValueError(
            f"{self!r} has no business day in the {_MAX_CLOSED_DAYS} days after {after}"
        )


def _zone(name: object) -> ZoneInfo:
    if not isinstance(name, str):
        raise ValueError(f"timezone must be an IANA zone name string, got {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"timezone {name!r} is not a known IANA time zone (e.g. 'Europe/Berlin')"
        ) from None


def _weekend(days: Iterable[int]) -> frozenset[int]:
    try:
        weekend = frozenset(days)
    except TypeError:
        raise ValueError(f"weekend must be an iterable of weekday numbers, got {days!r}") from None
    bad = [d for d in weekend if not isinstance(d, int) or isinstance(d, bool) or not 0 <= d <= 6]
    if bad:
        raise ValueError(f"weekend must hold weekday numbers 0 (Monday) to 6 (Sunday), got {bad!r}")
    if len(weekend) == 7:
        raise ValueError("weekend must leave at least one working weekday")
    return weekend


def _extra_holidays(values: Iterable[date | str]) -> frozenset[date]:
    if isinstance(values, str):
        raise ValueError(f"extra_holidays must be a list of dates, not the string {values!r}")
    result: set[date] = set()
    for value in values:
        if isinstance(value, datetime):
            raise ValueError(f"extra_holidays must hold dates, not the datetime {value!r}")
        if isinstance(value, date):
            result.add(value)
            continue
        try:
            result.add(date.fromisoformat(value))
        except (TypeError, ValueError):
            raise ValueError(
                f"extra_holidays must hold dates or ISO 'YYYY-MM-DD' strings, got {value!r}"
            ) from None
    return frozenset(result)


def _country_holidays(country: str | None, subdiv: str | None) -> holidays.HolidayBase | None:
    if country is None:
        if subdiv is not None:
            raise ValueError(f"subdiv {subdiv!r} needs a country")
        return None
    if not isinstance(country, str) or not (subdiv is None or isinstance(subdiv, str)):
        raise ValueError(f"country and subdiv must be strings, got {country!r} and {subdiv!r}")
    try:
        result: holidays.HolidayBase = holidays.country_holidays(country, subdiv=subdiv)
    except NotImplementedError as exc:
        # Name our option, not just holidays' message, so the user knows which to fix.
        known_country = country in holidays.list_supported_countries()
        option = "subdiv" if known_country and subdiv is not None else "country"
        value = country if option == "country" else subdiv
        raise ValueError(
            f"{option} {value!r} is not supported by the holidays package: {exc}"
        ) from None
    return result


# key -> (a copy of the spec it was built from, the calendar). Entries are checked against
# the current spec on every lookup, so override_settings (or any settings change) is
# followed without listening to signals.
_cache: dict[str, tuple[dict[str, Any], BusinessCalendar]] = {}
_cache_lock = threading.Lock()


def get_calendar(key: str) -> BusinessCalendar:
    """Return the calendar configured as ``BSFT_SAGA["CALENDARS"][key]``.

    The backend is built once per configuration (``import_string(BACKEND)(**OPTIONS)``)
    and shared; a changed setting, e.g. under ``override_settings``, builds it afresh.
    An unconfigured key raises :class:`UnknownCalendar`; a backend that cannot be
    imported or rejects its options raises ``ImproperlyConfigured`` naming the key.
    """
    calendars = saga_settings.calendars
    try:
        spec = calendars[key]
    except KeyError:
        raise UnknownCalendar(key, calendars) from None
    cached = _cache.get(key)
    if cached is not None and cached[0] == spec:
        return cached[1]
    calendar = _build(key, spec)
    with _cache_lock:
        _cache[key] = (deepcopy(dict(spec)), calendar)
    return calendar


def check_calendars() -> list[tuple[str, str]]:
    """Try to build every configured calendar; return ``(key, message)`` per failure.

    Entries whose shape is wrong (no ``BACKEND`` string, ``OPTIONS`` not a dict) are
    skipped: the settings check reports those. Nothing is cached.
    """
    calendars = saga_settings.raw().get("CALENDARS", {})
    if not isinstance(calendars, Mapping):
        return []
    problems: list[tuple[str, str]] = []
    for key, spec in calendars.items():
        if not isinstance(spec, Mapping) or not isinstance(spec.get("BACKEND"), str):
            continue
        if not isinstance(spec.get("OPTIONS", {}), Mapping):
            continue
        try:
            _build(key, spec)
        except ImproperlyConfigured as exc:
            problems.append((key, str(exc)))
        except Exception as exc:
            # A third-party backend may fail in any way; a system check must not crash.
            problems.append(
                (key, f"{_SETTING_PATH}[{key!r}]: building the calendar raised {exc!r}")
            )
    return problems


def _build(key: str, spec: Mapping[str, Any]) -> BusinessCalendar:
    backend_path: str = spec["BACKEND"]
    options: Mapping[str, Any] = spec.get("OPTIONS", {})
    where = f"{_SETTING_PATH}[{key!r}]"
    try:
        backend = import_string(backend_path)
    except ImportError as exc:
        raise ImproperlyConfigured(
            f"{where}: cannot import BACKEND {backend_path!r}: {exc}"
        ) from exc
    try:
        calendar = backend(**options)
    except (TypeError, ValueError) as exc:
        raise ImproperlyConfigured(f"{where}: bad OPTIONS for {backend_path}: {exc}") from exc
    if not isinstance(calendar, BusinessCalendar):
        raise ImproperlyConfigured(
            f"{where}: {backend_path} did not build a business calendar "
            "(an object with add(start, delay) and is_business_day(day))"
        )
    return calendar
