"""The ``BSFT_SAGA`` setting: defaults, validation and typed access.

``saga_settings`` reads ``django.conf.settings.BSFT_SAGA`` on every access, so it follows
``override_settings`` without any cache to invalidate. Nothing here runs at import time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

SETTING_NAME = "BSFT_SAGA"

CATCH_UP_POLICIES = ("fire_all", "fire_latest_per_saga", "skip_beyond_max_age")

DEFAULTS: dict[str, dict[str, Any]] = {
    "TIMEOUTS": {
        "POLL_INTERVAL": 5,
        "BATCH_SIZE": 100,
        "CATCH_UP_POLICY": "fire_all",
        "MAX_CATCH_UP_AGE": timedelta(days=1),
        "MAX_DISPATCH_ATTEMPTS": 10,
        # How long a dispatcher owns the rows it claimed; a dispatcher that dies holding
        # them is taken over once this has passed.
        "CLAIM_LEASE": timedelta(minutes=5),
    },
    "ENGINE": {
        # Times one event is re-applied after losing an optimistic-concurrency race (with
        # exponential back-off, so the default bounds the wait at roughly 20 seconds).
        "MAX_CONFLICT_RETRIES": 100,
    },
    "CALENDARS": {},
    "API": {
        "READ_CONTENT_PERMISSION": None,
        "AUDIT_RECORDER": "bsft_saga.audit.ModelAuditRecorder",
    },
}

# Sections whose keys are the user's own names rather than our option names.
_FREE_FORM_SECTIONS = {"CALENDARS"}


@dataclass(frozen=True)
class ConfigProblem:
    """One thing wrong with ``BSFT_SAGA``; ``path`` is like ``TIMEOUTS.BATCH_SIZE``."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{SETTING_NAME}[{self.path}]: {self.message}"


def _as_timedelta(value: Any) -> timedelta | None:
    if isinstance(value, timedelta):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return timedelta(seconds=value)
    return None


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def validate(raw: Any) -> list[ConfigProblem]:
    """Return every problem in a ``BSFT_SAGA`` value (empty when it is valid)."""
    if raw is None:
        return []
    if not isinstance(raw, Mapping):
        return [ConfigProblem("", f"must be a dict, not {type(raw).__name__}")]
    problems: list[ConfigProblem] = []
    for section, value in raw.items():
        if section not in DEFAULTS:
            problems.append(
                ConfigProblem(section, f"unknown section; expected one of {sorted(DEFAULTS)}")
            )
            continue
        if not isinstance(value, Mapping):
            problems.append(ConfigProblem(section, "must be a dict"))
            continue
        if section in _FREE_FORM_SECTIONS:
            continue
        for key in value:
            if key not in DEFAULTS[section]:
                problems.append(
                    ConfigProblem(
                        f"{section}.{key}",
                        f"unknown option; expected one of {sorted(DEFAULTS[section])}",
                    )
                )
    timeouts = _section(raw, "TIMEOUTS")
    for key in ("POLL_INTERVAL", "MAX_CATCH_UP_AGE", "CLAIM_LEASE"):
        delta = _as_timedelta(timeouts[key])
        if delta is None or delta <= timedelta(0):
            problems.append(
                ConfigProblem(
                    f"TIMEOUTS.{key}", "must be a positive number of seconds or a timedelta"
                )
            )
    for key in ("BATCH_SIZE", "MAX_DISPATCH_ATTEMPTS"):
        if not _positive_int(timeouts[key]):
            problems.append(ConfigProblem(f"TIMEOUTS.{key}", "must be a positive integer"))
    if timeouts["CATCH_UP_POLICY"] not in CATCH_UP_POLICIES:
        problems.append(
            ConfigProblem(
                "TIMEOUTS.CATCH_UP_POLICY",
                f"{timeouts['CATCH_UP_POLICY']!r} is not one of {', '.join(CATCH_UP_POLICIES)}",
            )
        )
    if not _positive_int(_section(raw, "ENGINE")["MAX_CONFLICT_RETRIES"]):
        problems.append(ConfigProblem("ENGINE.MAX_CONFLICT_RETRIES", "must be a positive integer"))
    calendars = raw.get("CALENDARS", {})
    if isinstance(calendars, Mapping):
        for key, spec in calendars.items():
            if not isinstance(spec, Mapping) or not isinstance(spec.get("BACKEND"), str):
                problems.append(
                    ConfigProblem(f"CALENDARS.{key}", "must be a dict with a dotted-path 'BACKEND'")
                )
            elif not isinstance(spec.get("OPTIONS", {}), Mapping):
                problems.append(ConfigProblem(f"CALENDARS.{key}.OPTIONS", "must be a dict"))
    return problems


def _section(raw: Mapping[str, Any], name: str) -> dict[str, Any]:
    merged = dict(DEFAULTS[name])
    value = raw.get(name)
    if isinstance(value, Mapping):
        merged.update(value)
    return merged


@dataclass(frozen=True)
class TimeoutSettings:
    poll_interval: timedelta
    batch_size: int
    catch_up_policy: str
    max_catch_up_age: timedelta
    max_dispatch_attempts: int
    claim_lease: timedelta


class SagaSettings:
    """Typed, validated view of ``settings.BSFT_SAGA``; read afresh on every access."""

    def raw(self) -> Mapping[str, Any]:
        value = getattr(settings, SETTING_NAME, None)
        return {} if value is None else value

    def _validated(self) -> Mapping[str, Any]:
        raw = self.raw()
        problems = validate(raw)
        if problems:
            raise ImproperlyConfigured("; ".join(str(p) for p in problems))
        return raw

    @property
    def timeouts(self) -> TimeoutSettings:
        section = _section(self._validated(), "TIMEOUTS")
        return TimeoutSettings(
            poll_interval=_as_timedelta(section["POLL_INTERVAL"]) or timedelta(seconds=5),
            batch_size=section["BATCH_SIZE"],
            catch_up_policy=section["CATCH_UP_POLICY"],
            max_catch_up_age=_as_timedelta(section["MAX_CATCH_UP_AGE"]) or timedelta(days=1),
            max_dispatch_attempts=section["MAX_DISPATCH_ATTEMPTS"],
            claim_lease=_as_timedelta(section["CLAIM_LEASE"]) or timedelta(minutes=5),
        )

    @property
    def max_conflict_retries(self) -> int:
        value: int = _section(self._validated(), "ENGINE")["MAX_CONFLICT_RETRIES"]
        return value

    @property
    def calendars(self) -> Mapping[str, Mapping[str, Any]]:
        value: Mapping[str, Mapping[str, Any]] = self._validated().get("CALENDARS", {})
        return value

    @property
    def api(self) -> dict[str, Any]:
        return _section(self._validated(), "API")


saga_settings = SagaSettings()
