"""``saga_settings``: the ``BSFT_SAGA`` setting with defaults, validation and typed access."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from bsft_saga.conf import DEFAULTS, StepLimits, saga_settings, validate

# Verbatim in docs/configuration.md ("Every key, with its default").
DOCUMENTED_DEFAULTS = {
    "MAX_PAYLOAD_BYTES": 262144,
    "TIMEOUTS": {
        "POLL_INTERVAL": 5,
        "BATCH_SIZE": 100,
        "CATCH_UP_POLICY": "fire_all",
        "MAX_CATCH_UP_AGE": timedelta(days=1),
        "MAX_DISPATCH_ATTEMPTS": 10,
        "RETRY_BACKOFF": 5,
        "MAX_RETRY_DELAY": 3600,
        "CLAIM_LEASE": timedelta(minutes=5),
        "STALE_AFTER": None,
    },
    "ENGINE": {
        "MAX_CONFLICT_RETRIES": 100,
        "MAX_TIMERS_PER_STEP": 1000,
        "MAX_EVENTS_PER_STEP": 1000,
        "MAX_PUBLISH_DEPTH": 16,
        "MAX_KEPT_EVENTS_PER_SAGA": 1000,
        "KEEP_EARLY_FOR": timedelta(days=1),
    },
    "CALENDARS": {},
    "API": {
        "READ_CONTENT_PERMISSION": None,
        "AUDIT_RECORDER": "bsft_saga.audit.ModelAuditRecorder",
    },
    "RETENTION": {
        "OLDER_THAN": timedelta(days=30),
        "KEEP_DEAD_LETTERED": True,
        "AUDIT_OLDER_THAN": None,
    },
}


def test_the_documented_defaults_are_the_defaults() -> None:
    assert DOCUMENTED_DEFAULTS == DEFAULTS
    assert validate(DOCUMENTED_DEFAULTS) == []


def test_missing_keys_take_their_defaults() -> None:
    with override_settings(BSFT_SAGA={}):
        timeouts = saga_settings.timeouts
        assert timeouts.poll_interval == timedelta(seconds=5)
        assert timeouts.batch_size == 100
        assert timeouts.catch_up_policy == "fire_all"
        assert timeouts.max_catch_up_age == timedelta(days=1)
        assert timeouts.max_dispatch_attempts == 10
        assert timeouts.retry_backoff == timedelta(seconds=5)
        assert timeouts.max_retry_delay == timedelta(hours=1)
        assert timeouts.claim_lease == timedelta(minutes=5)
        assert saga_settings.max_conflict_retries == 100
        assert saga_settings.step_limits == StepLimits(max_timers=1000, max_events=1000)
        assert saga_settings.calendars == {}
        assert saga_settings.api == {
            "READ_CONTENT_PERMISSION": None,
            "AUDIT_RECORDER": "bsft_saga.audit.ModelAuditRecorder",
        }


def test_no_bsft_saga_setting_at_all_means_every_default() -> None:
    with override_settings(BSFT_SAGA=None):
        assert saga_settings.timeouts.batch_size == DEFAULTS["TIMEOUTS"]["BATCH_SIZE"]


def test_saga_settings_follow_override_settings() -> None:
    before = saga_settings.timeouts.batch_size
    with override_settings(BSFT_SAGA={"TIMEOUTS": {"BATCH_SIZE": 7}}):
        assert saga_settings.timeouts.batch_size == 7
        with override_settings(BSFT_SAGA={"TIMEOUTS": {"BATCH_SIZE": 8}}):
            assert saga_settings.timeouts.batch_size == 8
        assert saga_settings.timeouts.batch_size == 7
    assert saga_settings.timeouts.batch_size == before


def test_the_test_settings_override_the_poll_interval() -> None:
    assert saga_settings.timeouts.poll_interval == timedelta(seconds=1)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(30, timedelta(seconds=30)), (0.5, timedelta(milliseconds=500)), (timedelta(2), timedelta(2))],
)
def test_durations_are_seconds_or_timedeltas(value: Any, expected: timedelta) -> None:
    with override_settings(BSFT_SAGA={"TIMEOUTS": {"CLAIM_LEASE": value}}):
        assert saga_settings.timeouts.claim_lease == expected


@pytest.mark.parametrize(
    ("timeouts", "expected"),
    [
        ({}, timedelta(minutes=1)),  # three test POLL_INTERVALs are less than the least
        ({"POLL_INTERVAL": 30}, timedelta(seconds=90)),
        ({"STALE_AFTER": 20}, timedelta(seconds=20)),
    ],
)
def test_a_dispatcher_is_stale_after_three_poll_intervals_and_a_minute_at_least(
    timeouts: dict[str, Any], expected: timedelta
) -> None:
    with override_settings(BSFT_SAGA={"TIMEOUTS": timeouts}):
        assert saga_settings.timeouts.stale_after == expected


def test_an_unknown_option_is_rejected_on_access() -> None:
    with (
        override_settings(BSFT_SAGA={"TIMEOUTS": {"BATCH": 10}}),
        pytest.raises(ImproperlyConfigured, match=r"TIMEOUTS\.BATCH.*unknown option"),
    ):
        saga_settings.timeouts  # noqa: B018


def test_an_unknown_section_is_rejected_on_access() -> None:
    with (
        override_settings(BSFT_SAGA={"TIMEOUT": {}}),
        pytest.raises(ImproperlyConfigured, match=r"BSFT_SAGA\[TIMEOUT\].*unknown section"),
    ):
        saga_settings.max_conflict_retries  # noqa: B018


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ({"TIMEOUTS": {"POLL_INTERVAL": 0}}, "TIMEOUTS.POLL_INTERVAL"),
        ({"TIMEOUTS": {"MAX_CATCH_UP_AGE": "1d"}}, "TIMEOUTS.MAX_CATCH_UP_AGE"),
        ({"TIMEOUTS": {"BATCH_SIZE": True}}, "TIMEOUTS.BATCH_SIZE"),
        ({"TIMEOUTS": {"MAX_DISPATCH_ATTEMPTS": 0}}, "TIMEOUTS.MAX_DISPATCH_ATTEMPTS"),
        ({"TIMEOUTS": {"CATCH_UP_POLICY": "fire_latest"}}, "TIMEOUTS.CATCH_UP_POLICY"),
        ({"TIMEOUTS": {"STALE_AFTER": 0}}, "TIMEOUTS.STALE_AFTER"),
        ({"TIMEOUTS": {"STALE_AFTER": "1m"}}, "TIMEOUTS.STALE_AFTER"),
        ({"ENGINE": {"MAX_CONFLICT_RETRIES": 0}}, "ENGINE.MAX_CONFLICT_RETRIES"),
        ({"ENGINE": {"MAX_TIMERS_PER_STEP": 0}}, "ENGINE.MAX_TIMERS_PER_STEP"),
        ({"ENGINE": {"MAX_EVENTS_PER_STEP": 1.5}}, "ENGINE.MAX_EVENTS_PER_STEP"),
        ({"ENGINE": {"MAX_PUBLISH_DEPTH": 0}}, "ENGINE.MAX_PUBLISH_DEPTH"),
        ({"ENGINE": {"MAX_PUBLISH_DEPTH": "16"}}, "ENGINE.MAX_PUBLISH_DEPTH"),
        ({"CALENDARS": {"berlin": "bsft_saga.calendars.X"}}, "CALENDARS.berlin"),
        ({"CALENDARS": {"berlin": {"BACKEND": "x.Y", "OPTIONS": []}}}, "CALENDARS.berlin.OPTIONS"),
        ({"API": []}, "API"),
        ({"RETENTION": {"OLDER_THAN": 0}}, "RETENTION.OLDER_THAN"),
        ({"RETENTION": {"OLDER_THAN": "30d"}}, "RETENTION.OLDER_THAN"),
        ({"RETENTION": {"KEEP_DEAD_LETTERED": 1}}, "RETENTION.KEEP_DEAD_LETTERED"),
        ({"RETENTION": {"AUDIT_OLDER_THAN": -1}}, "RETENTION.AUDIT_OLDER_THAN"),
        ({"RETENTION": {"AUDIT_OLDER_THAN": "1y"}}, "RETENTION.AUDIT_OLDER_THAN"),
        ({"RETENTION": {"OLDER": 1}}, "RETENTION.OLDER"),
    ],
)
def test_a_bad_value_is_rejected_naming_its_path(raw: dict[str, Any], path: str) -> None:
    problems = validate(raw)
    assert [p.path for p in problems] == [path]
    with override_settings(BSFT_SAGA=raw), pytest.raises(ImproperlyConfigured, match=path):
        saga_settings.timeouts  # noqa: B018


def test_retention_defaults_keep_dead_letters_and_every_audit_record() -> None:
    with override_settings(BSFT_SAGA={}):
        retention = saga_settings.retention
    assert retention.older_than == timedelta(days=30)
    assert retention.keep_dead_lettered is True
    assert retention.audit_older_than is None


def test_retention_windows_are_seconds_or_timedeltas() -> None:
    raw = {"RETENTION": {"OLDER_THAN": 7 * 86400, "AUDIT_OLDER_THAN": timedelta(days=365)}}
    with override_settings(BSFT_SAGA=raw):
        retention = saga_settings.retention
    assert retention.older_than == timedelta(days=7)
    assert retention.audit_older_than == timedelta(days=365)


def test_calendar_names_are_the_users_own() -> None:
    raw = {"CALENDARS": {"any-name-you-like": {"BACKEND": "x.Y"}}}
    assert validate(raw) == []


def test_the_typed_view_is_built_once_per_setting_value() -> None:
    # The engine reads it for every event: a value is validated and typed once.
    assert saga_settings.timeouts is saga_settings.timeouts
    before = saga_settings.timeouts
    with override_settings(BSFT_SAGA={"TIMEOUTS": {"BATCH_SIZE": 7}}):
        assert saga_settings.timeouts.batch_size == 7
    assert saga_settings.timeouts == before
