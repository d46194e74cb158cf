"""Business calendars: counting timer delays in Berlin working days.

Expected datetimes are written out by hand from a wall calendar, never recomputed.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from bsft_saga.calendars import (
    MAX_BUSINESS_DAYS,
    BusinessCalendar,
    UnknownCalendar,
    WeekdayBusinessCalendar,
    check_calendars,
    get_calendar,
)

BERLIN_OPTIONS: dict[str, Any] = {"country": "DE", "subdiv": "BE", "timezone": "Europe/Berlin"}


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def calendars_setting(**calendars: dict[str, Any]) -> dict[str, Any]:
    return {"CALENDARS": calendars}


def weekday_calendar(**options: Any) -> dict[str, Any]:
    return {"BACKEND": "bsft_saga.calendars.WeekdayBusinessCalendar", "OPTIONS": options}


@pytest.fixture
def berlin() -> WeekdayBusinessCalendar:
    return WeekdayBusinessCalendar(**BERLIN_OPTIONS)


class SevenDayCalendar:
    """Every day is a working day; the docs' custom-backend example."""

    def is_business_day(self, day: date) -> bool:
        return True

    def add(self, start: datetime, delay: timedelta) -> datetime:
        if start.tzinfo is None:
            raise ValueError("start must be aware")
        return (start + delay).astimezone(UTC)


class CountingCalendar(SevenDayCalendar):
    built = 0

    def __init__(self, **options: Any) -> None:
        type(self).built += 1
        self.options = options


class NotACalendar:
    pass


# --- The contract example -------------------------------------------------------------


def test_two_business_days_over_the_spring_dst_change_keep_berlin_wall_time(
    berlin: WeekdayBusinessCalendar,
) -> None:
    # Friday 11:00 CET; DST begins Sunday 29 March; Tuesday 11:00 CEST is 09:00 UTC.
    assert berlin.add(utc(2026, 3, 27, 10), timedelta(days=2)) == utc(2026, 3, 31, 9)


def test_the_configured_berlin_calendar_gives_the_contract_example() -> None:
    calendar = get_calendar("berlin")

    assert calendar.add(utc(2026, 3, 27, 10), timedelta(days=2)) == utc(2026, 3, 31, 9)


def test_one_business_day_over_the_autumn_dst_change_keeps_berlin_wall_time(
    berlin: WeekdayBusinessCalendar,
) -> None:
    # Friday 12:00 CEST; DST ends Sunday 25 October; Monday 12:00 CET is 11:00 UTC.
    assert berlin.add(utc(2026, 10, 23, 10), timedelta(days=1)) == utc(2026, 10, 26, 11)


# --- Weekends and holidays --------------------------------------------------------------


def test_a_business_day_from_friday_is_monday(berlin: WeekdayBusinessCalendar) -> None:
    assert berlin.add(utc(2026, 1, 16, 8, 30), timedelta(days=1)) == utc(2026, 1, 19, 8, 30)


def test_five_business_days_are_one_calendar_week(berlin: WeekdayBusinessCalendar) -> None:
    assert berlin.add(utc(2026, 1, 14, 8), timedelta(days=5)) == utc(2026, 1, 21, 8)


def test_christmas_days_are_skipped(berlin: WeekdayBusinessCalendar) -> None:
    # Thursday 24 Dec -> Fri 25 (holiday), Sat 26 (holiday and weekend), Sun -> Mon 28.
    assert berlin.add(utc(2026, 12, 24, 10), timedelta(days=1)) == utc(2026, 12, 28, 10)


def test_easter_friday_and_monday_are_skipped(berlin: WeekdayBusinessCalendar) -> None:
    # Thursday 2 April -> Good Friday, weekend, Easter Monday -> Tuesday 7 April.
    assert berlin.add(utc(2026, 4, 2, 7), timedelta(days=1)) == utc(2026, 4, 7, 7)


def test_berlin_womens_day_is_skipped_in_berlin_only() -> None:
    # 8 March 2027 is a Monday: a public holiday in Berlin, a working day in Bavaria.
    friday = utc(2027, 3, 5, 9)
    berlin = WeekdayBusinessCalendar(**BERLIN_OPTIONS)
    bavaria = WeekdayBusinessCalendar(country="DE", subdiv="BY", timezone="Europe/Berlin")

    assert berlin.add(friday, timedelta(days=1)) == utc(2027, 3, 9, 9)
    assert bavaria.add(friday, timedelta(days=1)) == utc(2027, 3, 8, 9)


def test_is_business_day_knows_weekends_and_holidays(berlin: WeekdayBusinessCalendar) -> None:
    assert berlin.is_business_day(date(2026, 3, 27))  # Friday
    assert not berlin.is_business_day(date(2026, 3, 28))  # Saturday
    assert not berlin.is_business_day(date(2026, 3, 29))  # Sunday
    assert not berlin.is_business_day(date(2027, 3, 8))  # Women's Day, Berlin
    assert not berlin.is_business_day(date(2026, 12, 25))  # Christmas


def test_is_business_day_refuses_a_datetime(berlin: WeekdayBusinessCalendar) -> None:
    with pytest.raises(TypeError, match="date, not a datetime"):
        berlin.is_business_day(utc(2026, 3, 27, 10))


def test_extra_holidays_accept_dates_and_iso_strings() -> None:
    calendar = WeekdayBusinessCalendar(extra_holidays=[date(2026, 6, 1), "2026-06-02"])

    assert calendar.add(utc(2026, 5, 29, 12), timedelta(days=1)) == utc(2026, 6, 3, 12)


def test_a_custom_weekend() -> None:
    # Friday and Saturday off, Sunday is a working day.
    calendar = WeekdayBusinessCalendar(weekend=[4, 5])

    assert calendar.add(utc(2026, 3, 26, 12), timedelta(days=1)) == utc(2026, 3, 29, 12)


def test_no_country_means_no_public_holidays() -> None:
    calendar = WeekdayBusinessCalendar(timezone="Europe/Berlin")

    assert calendar.add(utc(2026, 12, 24, 10), timedelta(days=1)) == utc(2026, 12, 25, 10)


# --- Starting on a non-business day -------------------------------------------------------


def test_a_business_day_from_saturday_is_monday_at_the_same_local_time(
    berlin: WeekdayBusinessCalendar,
) -> None:
    # Saturday 11:00 CET -> Monday 11:00 CEST (DST began on the Sunday in between).
    assert berlin.add(utc(2026, 3, 28, 10), timedelta(days=1)) == utc(2026, 3, 30, 9)


def test_a_business_day_from_sunday_is_monday(berlin: WeekdayBusinessCalendar) -> None:
    assert berlin.add(utc(2026, 3, 29, 10), timedelta(days=1)) == utc(2026, 3, 30, 10)


def test_a_start_in_another_zone_is_counted_in_berlin(berlin: WeekdayBusinessCalendar) -> None:
    # Friday 23:30 EDT in New York is already Saturday 04:30 CET in Berlin: the next
    # business day is Monday 04:30 CEST.
    new_york = datetime(2026, 3, 27, 23, 30, tzinfo=ZoneInfo("America/New_York"))

    assert berlin.add(new_york, timedelta(days=1)) == utc(2026, 3, 30, 2, 30)


def test_the_local_date_decides_not_the_utc_date(berlin: WeekdayBusinessCalendar) -> None:
    # Sunday 23:30 UTC is Monday 00:30 CET in Berlin, so one business day is Tuesday.
    assert berlin.add(utc(2026, 1, 18, 23, 30), timedelta(days=1)) == utc(2026, 1, 19, 23, 30)


# --- Sub-day delays -----------------------------------------------------------------------


def test_hours_on_a_business_day_are_plain_hours(berlin: WeekdayBusinessCalendar) -> None:
    assert berlin.add(utc(2026, 3, 25, 10), timedelta(hours=3)) == utc(2026, 3, 25, 13)


def test_hours_that_land_on_a_weekend_move_to_monday_at_that_local_time(
    berlin: WeekdayBusinessCalendar,
) -> None:
    # Friday 17:00 CET + 8h = Saturday 01:00 -> Monday 01:00 CEST = Sunday 23:00 UTC.
    assert berlin.add(utc(2026, 3, 27, 16), timedelta(hours=8)) == utc(2026, 3, 29, 23)


def test_days_and_hours_count_days_first(berlin: WeekdayBusinessCalendar) -> None:
    # Friday 11:00 CET + 1 business day = Monday 11:00 CEST, + 2h = 13:00 CEST.
    assert berlin.add(utc(2026, 3, 27, 10), timedelta(days=1, hours=2)) == utc(2026, 3, 30, 11)


def test_hours_from_a_weekend_start_move_to_monday(berlin: WeekdayBusinessCalendar) -> None:
    # Saturday 11:00 CET + 1h = Saturday 12:00 -> Monday 12:00 CEST.
    assert berlin.add(utc(2026, 3, 28, 10), timedelta(hours=1)) == utc(2026, 3, 30, 10)


def test_zero_delay_returns_start_unchanged_in_utc(berlin: WeekdayBusinessCalendar) -> None:
    saturday = datetime(2026, 3, 28, 11, tzinfo=ZoneInfo("Europe/Berlin"))

    result = berlin.add(saturday, timedelta(0))

    assert result == utc(2026, 3, 28, 10)
    assert result.tzinfo is UTC


def test_the_result_is_utc(berlin: WeekdayBusinessCalendar) -> None:
    assert berlin.add(utc(2026, 3, 27, 10), timedelta(days=2)).tzinfo is UTC


# --- Local times that DST skips or repeats --------------------------------------------------


def test_a_wall_time_in_the_spring_gap_uses_the_offset_before_the_change() -> None:
    # Every day works here. Saturday 02:30 CET + 1 day = Sunday 02:30, which does not
    # exist in Berlin; fold=0 reads it with CET (+01:00): 01:30 UTC, i.e. 03:30 CEST.
    calendar = WeekdayBusinessCalendar(timezone="Europe/Berlin", weekend=())

    assert calendar.add(utc(2026, 3, 28, 1, 30), timedelta(days=1)) == utc(2026, 3, 29, 1, 30)


def test_a_repeated_wall_time_in_the_autumn_fold_is_the_first_one() -> None:
    # Saturday 02:30 CEST + 1 day = Sunday 02:30, which happens twice; fold=0 is the
    # first, still CEST (+02:00): 00:30 UTC.
    calendar = WeekdayBusinessCalendar(timezone="Europe/Berlin", weekend=())

    assert calendar.add(utc(2026, 10, 24, 0, 30), timedelta(days=1)) == utc(2026, 10, 25, 0, 30)


# --- Rejected input --------------------------------------------------------------------------


def test_a_naive_start_is_rejected(berlin: WeekdayBusinessCalendar) -> None:
    with pytest.raises(ValueError, match="aware"):
        berlin.add(datetime(2026, 3, 27, 10), timedelta(days=1))


def test_a_negative_delay_is_rejected(berlin: WeekdayBusinessCalendar) -> None:
    with pytest.raises(ValueError, match="negative"):
        berlin.add(utc(2026, 3, 27, 10), timedelta(hours=-1))


@pytest.mark.parametrize("days", [MAX_BUSINESS_DAYS + 1, 3_000_000, 999_999_999])
def test_a_delay_of_more_business_days_than_the_bound_is_rejected_at_once(
    berlin: WeekdayBusinessCalendar, days: int
) -> None:
    # 3,000,000 days used to loop for six seconds before overflowing.
    with pytest.raises(ValueError, match=f"at most {MAX_BUSINESS_DAYS} business days"):
        berlin.add(utc(2026, 3, 27, 10), timedelta(days=days))


def test_the_bound_of_business_days_is_accepted_and_ends_in_range(
    berlin: WeekdayBusinessCalendar,
) -> None:
    end = berlin.add(utc(2026, 3, 27, 10), timedelta(days=MAX_BUSINESS_DAYS))

    assert 2160 < end.year < 2200


def test_a_delay_that_ends_after_year_9999_is_rejected(berlin: WeekdayBusinessCalendar) -> None:
    with pytest.raises(ValueError, match="after year 9999"):
        berlin.add(utc(9999, 12, 1), timedelta(days=30))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"country": "XX"}, "country 'XX'"),
        ({"country": "DE", "subdiv": "ZZ"}, "subdiv 'ZZ'"),
        ({"subdiv": "BE"}, "subdiv 'BE' needs a country"),
        ({"timezone": "Europe/Nowhere"}, "timezone 'Europe/Nowhere'"),
        ({"timezone": ""}, "timezone ''"),
        ({"weekend": [7]}, "weekend"),
        ({"weekend": range(7)}, "weekend must leave"),
        ({"extra_holidays": ["25.12.2026"]}, "extra_holidays"),
        ({"extra_holidays": "2026-12-25"}, "extra_holidays"),
    ],
)
def test_a_bad_option_is_a_value_error_naming_it(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        WeekdayBusinessCalendar(**options)


# --- The registry ----------------------------------------------------------------------------


def test_weekday_calendar_satisfies_the_protocol(berlin: WeekdayBusinessCalendar) -> None:
    assert isinstance(berlin, BusinessCalendar)
    assert isinstance(SevenDayCalendar(), BusinessCalendar)


def test_get_calendar_builds_each_configured_calendar_once() -> None:
    assert get_calendar("berlin") is get_calendar("berlin")


def test_get_calendar_follows_override_settings() -> None:
    friday = utc(2027, 3, 5, 9)
    assert get_calendar("berlin").add(friday, timedelta(days=1)) == utc(2027, 3, 9, 9)

    bavaria = weekday_calendar(country="DE", subdiv="BY", timezone="Europe/Berlin")
    with override_settings(BSFT_SAGA=calendars_setting(berlin=bavaria)):
        assert get_calendar("berlin").add(friday, timedelta(days=1)) == utc(2027, 3, 8, 9)

    assert get_calendar("berlin").add(friday, timedelta(days=1)) == utc(2027, 3, 9, 9)


def test_a_custom_backend_gets_its_options_and_is_cached_per_configuration() -> None:
    CountingCalendar.built = 0
    spec = {"BACKEND": "tests.test_calendars.CountingCalendar", "OPTIONS": {"colour": "red"}}
    with override_settings(BSFT_SAGA=calendars_setting(custom=spec)):
        first = get_calendar("custom")
        assert get_calendar("custom") is first
        assert isinstance(first, CountingCalendar)
        assert first.options == {"colour": "red"}
    other = {
        "BACKEND": "tests.test_calendars.CountingCalendar",
        "OPTIONS": {"colour": "blue"},
    }
    with override_settings(BSFT_SAGA=calendars_setting(custom=other)):
        second = get_calendar("custom")
        assert isinstance(second, CountingCalendar)
        assert second.options == {"colour": "blue"}

    assert CountingCalendar.built == 2


def test_an_unknown_key_names_the_key_the_setting_and_the_configured_keys() -> None:
    with pytest.raises(UnknownCalendar) as excinfo:
        get_calendar("paris")

    message = str(excinfo.value)
    assert "'paris'" in message
    assert 'BSFT_SAGA["CALENDARS"]' in message
    assert "'berlin'" in message
    assert isinstance(excinfo.value, LookupError)


def test_an_unknown_key_with_no_calendars_configured_says_so() -> None:
    with (
        override_settings(BSFT_SAGA={}),
        pytest.raises(UnknownCalendar, match="configured calendars: none"),
    ):
        get_calendar("berlin")


def test_bad_options_in_the_setting_are_improperly_configured_naming_the_key() -> None:
    setting = calendars_setting(broken=weekday_calendar(country="DE", timezone="Mars/Olympus"))
    with (
        override_settings(BSFT_SAGA=setting),
        pytest.raises(ImproperlyConfigured, match=r"\['broken'\].*timezone 'Mars/Olympus'"),
    ):
        get_calendar("broken")


def test_an_unknown_option_is_improperly_configured() -> None:
    setting = calendars_setting(broken=weekday_calendar(contry="DE"))
    with (
        override_settings(BSFT_SAGA=setting),
        pytest.raises(ImproperlyConfigured, match="contry"),
    ):
        get_calendar("broken")


def test_an_unimportable_backend_is_improperly_configured() -> None:
    setting = calendars_setting(broken={"BACKEND": "nowhere.Calendar"})
    with (
        override_settings(BSFT_SAGA=setting),
        pytest.raises(ImproperlyConfigured, match=r"cannot import BACKEND 'nowhere\.Calendar'"),
    ):
        get_calendar("broken")


def test_a_backend_that_is_not_a_calendar_is_improperly_configured() -> None:
    setting = calendars_setting(broken={"BACKEND": "tests.test_calendars.NotACalendar"})
    with (
        override_settings(BSFT_SAGA=setting),
        pytest.raises(ImproperlyConfigured, match="did not build a business calendar"),
    ):
        get_calendar("broken")


# --- check_calendars ---------------------------------------------------------------------------


def test_check_calendars_passes_the_test_settings() -> None:
    assert check_calendars() == []


def test_check_calendars_reports_each_broken_calendar_by_key() -> None:
    setting = calendars_setting(
        berlin=weekday_calendar(**BERLIN_OPTIONS),
        bad_country=weekday_calendar(country="XX"),
        bad_backend={"BACKEND": "nowhere.Calendar"},
    )
    with override_settings(BSFT_SAGA=setting):
        problems = dict(check_calendars())

    assert sorted(problems) == ["bad_backend", "bad_country"]
    assert "country 'XX'" in problems["bad_country"]
    assert "nowhere.Calendar" in problems["bad_backend"]


def test_check_calendars_leaves_malformed_entries_to_the_settings_check() -> None:
    setting = calendars_setting(shapeless={"OPTIONS": {}})
    with override_settings(BSFT_SAGA=setting):
        assert check_calendars() == []
