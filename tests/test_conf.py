"""``saga_settings``: the ``BSFT_SAGA`` setting with defaults, validation and typed access."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.test import override_settings

from bsft_saga.conf import (
    DEFAULTS,
    MOVED_TO_DELIVERY,
    SECTIONS,
    moved_keys,
    saga_settings,
    validate,
)

# Verbatim in docs/configuration.md ("Every key, with its default").
DOCUMENTED_DEFAULTS = {
    "MAX_PAYLOAD_BYTES": 262144,
    "DELIVERY": {
        "POLL_INTERVAL": 5,
        "BATCH_SIZE": 100,
        "MAX_DISPATCH_ATTEMPTS": 10,
        "RETRY_BACKOFF": 5,
        "MAX_RETRY_DELAY": 3600,
        "CLAIM_LEASE": timedelta(minutes=5),
        "STALE_AFTER": None,
    },
    "TIMEOUTS": {
        "CATCH_UP_POLICY": "fire_all",
        "MAX_CATCH_UP_AGE": timedelta(days=1),
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
    "TELEMETRY": {
        "TRACE_PARENT": "link",
    },
}


def test_the_documented_defaults_are_the_defaults() -> None:
    assert DOCUMENTED_DEFAULTS == DEFAULTS
    assert validate(DOCUMENTED_DEFAULTS) == []


def test_missing_keys_take_their_defaults() -> None:
    with override_settings(BSFT_SAGA={}):
        delivery = saga_settings.delivery
        assert delivery.poll_interval == timedelta(seconds=5)
        assert delivery.batch_size == 100
        assert delivery.max_dispatch_attempts == 10
        assert delivery.retry_backoff == timedelta(seconds=5)
        assert delivery.max_retry_delay == timedelta(hours=1)
        assert delivery.claim_lease == timedelta(minutes=5)
        assert delivery.stale_after == timedelta(seconds=15) * 4  # a minute, the least
        assert saga_settings.timers.catch_up_policy == "fire_all"
        assert saga_settings.timers.max_catch_up_age == timedelta(days=1)
        engine = saga_settings.engine
        assert engine.max_conflict_retries == 100
        assert (engine.max_timers_per_step, engine.max_events_per_step) == (1000, 1000)
        assert engine.max_publish_depth == 16
        assert saga_settings.calendars == {}
        assert saga_settings.api.read_content_permission is None
        assert saga_settings.api.audit_recorder == "bsft_saga.audit.ModelAuditRecorder"
        assert saga_settings.max_payload_bytes == 262144


def test_no_bsft_saga_setting_at_all_means_every_default() -> None:
    with override_settings(BSFT_SAGA=None):
        assert saga_settings.delivery.batch_size == DEFAULTS["DELIVERY"]["BATCH_SIZE"]


def test_saga_settings_follow_override_settings() -> None:
    before = saga_settings.delivery.batch_size
    with override_settings(BSFT_SAGA={"DELIVERY": {"BATCH_SIZE": 7}}):
        assert saga_settings.delivery.batch_size == 7
        with override_settings(BSFT_SAGA={"DELIVERY": {"BATCH_SIZE": 8}}):
            assert saga_settings.delivery.batch_size == 8
        assert saga_settings.delivery.batch_size == 7
    assert saga_settings.delivery.batch_size == before


def test_a_value_edited_in_place_is_read_again_after_setting_changed() -> None:
    raw: dict[str, Any] = {"DELIVERY": {"BATCH_SIZE": 7}}
    with override_settings(BSFT_SAGA=raw):
        assert saga_settings.delivery.batch_size == 7
        raw["DELIVERY"]["BATCH_SIZE"] = 9
        setting_changed.send(sender=None, setting="BSFT_SAGA", value=raw, enter=True)
        assert saga_settings.delivery.batch_size == 9


def test_the_typed_settings_are_read_only() -> None:
    with pytest.raises(AttributeError, match="read-only"):
        saga_settings.delivery.batch_size = 3


def test_the_test_settings_override_the_poll_interval() -> None:
    assert saga_settings.delivery.poll_interval == timedelta(seconds=1)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(30, timedelta(seconds=30)), (0.5, timedelta(milliseconds=500)), (timedelta(2), timedelta(2))],
)
def test_durations_are_seconds_or_timedeltas(value: Any, expected: timedelta) -> None:
    with override_settings(BSFT_SAGA={"DELIVERY": {"CLAIM_LEASE": value}}):
        assert saga_settings.delivery.claim_lease == expected


@pytest.mark.parametrize(
    ("delivery", "expected"),
    [
        ({}, timedelta(minutes=1)),  # three test POLL_INTERVALs are less than the least
        ({"POLL_INTERVAL": 30}, timedelta(seconds=90)),
        ({"STALE_AFTER": 20}, timedelta(seconds=20)),
    ],
)
def test_a_dispatcher_is_stale_after_three_poll_intervals_and_a_minute_at_least(
    delivery: dict[str, Any], expected: timedelta
) -> None:
    with override_settings(BSFT_SAGA={"DELIVERY": delivery}):
        assert saga_settings.delivery.stale_after == expected


def test_an_unknown_option_is_rejected_on_access() -> None:
    with (
        override_settings(BSFT_SAGA={"DELIVERY": {"BATCH": 10}}),
        pytest.raises(ImproperlyConfigured, match=r"DELIVERY\.BATCH.*unknown option"),
    ):
        saga_settings.delivery  # noqa: B018


def test_an_unknown_section_is_rejected_on_access() -> None:
    with (
        override_settings(BSFT_SAGA={"TIMEOUT": {}}),
        pytest.raises(ImproperlyConfigured, match=r"BSFT_SAGA\[TIMEOUT\].*unknown section"),
    ):
        saga_settings.engine  # noqa: B018


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ({"DELIVERY": {"POLL_INTERVAL": 0}}, "DELIVERY.POLL_INTERVAL"),
        ({"DELIVERY": {"BATCH_SIZE": True}}, "DELIVERY.BATCH_SIZE"),
        ({"DELIVERY": {"MAX_DISPATCH_ATTEMPTS": 0}}, "DELIVERY.MAX_DISPATCH_ATTEMPTS"),
        ({"DELIVERY": {"RETRY_BACKOFF": -5}}, "DELIVERY.RETRY_BACKOFF"),
        ({"DELIVERY": {"MAX_RETRY_DELAY": float("nan")}}, "DELIVERY.MAX_RETRY_DELAY"),
        ({"DELIVERY": {"CLAIM_LEASE": 10**20}}, "DELIVERY.CLAIM_LEASE"),
        ({"DELIVERY": {"STALE_AFTER": 0}}, "DELIVERY.STALE_AFTER"),
        ({"DELIVERY": {"STALE_AFTER": "1m"}}, "DELIVERY.STALE_AFTER"),
        ({"DELIVERY": {"BATCHSIZE": 1}}, "DELIVERY.BATCHSIZE"),
        ({"DELIVERY": 100}, "DELIVERY"),
        ({"TIMEOUTS": {"BATCH_SIZE": True}}, "TIMEOUTS.BATCH_SIZE"),  # the old place
        ({"TIMEOUTS": {"MAX_CATCH_UP_AGE": "1d"}}, "TIMEOUTS.MAX_CATCH_UP_AGE"),
        ({"TIMEOUTS": {"CATCH_UP_POLICY": "fire_latest"}}, "TIMEOUTS.CATCH_UP_POLICY"),
        ({"MAX_PAYLOAD_BYTES": 0}, "MAX_PAYLOAD_BYTES"),
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
        ({"TELEMETRY": {"TRACE_PARENT": "parent"}}, "TELEMETRY.TRACE_PARENT"),
    ],
)
def test_a_bad_value_is_rejected_naming_its_path(raw: dict[str, Any], path: str) -> None:
    problems = validate(raw)
    assert [p.path for p in problems] == [path]
    with override_settings(BSFT_SAGA=raw), pytest.raises(ImproperlyConfigured, match=path):
        saga_settings.delivery  # noqa: B018


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
    assert saga_settings.delivery is saga_settings.delivery
    before = saga_settings.delivery
    with override_settings(BSFT_SAGA={"DELIVERY": {"BATCH_SIZE": 7}}):
        assert saga_settings.delivery.batch_size == 7
    assert saga_settings.delivery == before


def test_every_key_is_documented_in_its_section_of_the_configuration_page() -> None:
    page = (Path(__file__).parents[1] / "docs" / "configuration.md").read_text()
    for section in SECTIONS:
        table = page.split(f"### `{section.name}`", 1)[1].split("\n### ", 1)[0]
        for option in section.options():
            assert f"| `{option.key}` |" in table, (section.name, option.key)


# --- keys that moved from TIMEOUTS to DELIVERY ----------------------------------------------

MOVED = [
    ("POLL_INTERVAL", 30, timedelta(seconds=30), "poll_interval"),
    ("BATCH_SIZE", 7, 7, "batch_size"),
    ("MAX_DISPATCH_ATTEMPTS", 2, 2, "max_dispatch_attempts"),
    ("RETRY_BACKOFF", 10, timedelta(seconds=10), "retry_backoff"),
    ("MAX_RETRY_DELAY", 60, timedelta(minutes=1), "max_retry_delay"),
    ("CLAIM_LEASE", timedelta(minutes=9), timedelta(minutes=9), "claim_lease"),
    ("STALE_AFTER", 20, timedelta(seconds=20), "stale_after"),
]


def test_the_keys_the_outbox_shares_with_timers_moved_to_delivery() -> None:
    assert [key for key, *_ in MOVED] == list(MOVED_TO_DELIVERY)
    assert set(DEFAULTS["TIMEOUTS"]) == {"CATCH_UP_POLICY", "MAX_CATCH_UP_AGE"}


@pytest.mark.parametrize(("key", "value", "expected", "attribute"), MOVED)
def test_a_moved_key_still_works_in_its_old_place(
    key: str, value: Any, expected: Any, attribute: str
) -> None:
    with override_settings(BSFT_SAGA={"TIMEOUTS": {key: value}}):
        assert validate({"TIMEOUTS": {key: value}}) == []
        assert getattr(saga_settings.delivery, attribute) == expected
        assert moved_keys({"TIMEOUTS": {key: value}}) == [key]


@pytest.mark.parametrize(("key", "value", "expected", "attribute"), MOVED)
def test_a_moved_key_in_its_new_place_is_read_there(
    key: str, value: Any, expected: Any, attribute: str
) -> None:
    with override_settings(BSFT_SAGA={"DELIVERY": {key: value}}):
        assert getattr(saga_settings.delivery, attribute) == expected


def test_a_key_set_in_both_places_is_refused_naming_both() -> None:
    raw = {"TIMEOUTS": {"BATCH_SIZE": 7}, "DELIVERY": {"BATCH_SIZE": 7}}
    [problem] = validate(raw)
    assert problem.path == "DELIVERY.BATCH_SIZE"
    assert 'BSFT_SAGA["TIMEOUTS"]["BATCH_SIZE"]' in problem.message
    assert 'keep only BSFT_SAGA["DELIVERY"]["BATCH_SIZE"]' in problem.message
    assert moved_keys(raw) == []  # the error says it: no warning besides
    page = (Path(__file__).parents[1] / "docs" / "configuration.md").read_text()
    assert f"\n{problem}\n" in page  # configuration.md shows the real message
    with (
        override_settings(BSFT_SAGA=raw),
        pytest.raises(ImproperlyConfigured, match=r"DELIVERY\.BATCH_SIZE.*set twice"),
    ):
        saga_settings.delivery  # noqa: B018


def test_a_bad_value_in_the_old_place_names_the_old_place() -> None:
    [problem] = validate({"TIMEOUTS": {"CLAIM_LEASE": "5m"}})
    assert str(problem) == (
        "BSFT_SAGA[TIMEOUTS.CLAIM_LEASE]: must be a positive number of seconds or a timedelta"
    )


def test_an_unknown_timers_option_lists_only_the_timers_own_keys() -> None:
    [problem] = validate({"TIMEOUTS": {"BATCH": 1}})
    assert (
        problem.message == "unknown option; expected one of ['CATCH_UP_POLICY', 'MAX_CATCH_UP_AGE']"
    )
