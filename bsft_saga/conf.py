"""The ``BSFT_SAGA`` setting: defaults, validation and typed access.

``saga_settings`` follows ``override_settings``: it types and validates each value of
``settings.BSFT_SAGA`` once, on first access. Nothing here reads settings at import time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from types import MappingProxyType
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

SETTING_NAME = "BSFT_SAGA"

CATCH_UP_POLICIES = ("fire_all", "fire_latest_per_saga", "skip_beyond_max_age")

DEFAULTS: dict[str, Any] = {
    # The largest encoded event (compact UTF-8 JSON, in bytes) publish() and
    # schedule_timeout() accept; None: no limit. Every pass that claims a row reads it back.
    "MAX_PAYLOAD_BYTES": 262144,
    "TIMEOUTS": {
        "POLL_INTERVAL": 5,
        "BATCH_SIZE": 100,
        "CATCH_UP_POLICY": "fire_all",
        "MAX_CATCH_UP_AGE": timedelta(days=1),
        "MAX_DISPATCH_ATTEMPTS": 10,
        # The wait after a row's first failed attempt; it doubles with every further one,
        # up to MAX_RETRY_DELAY (each wait is jittered down by up to a fifth).
        "RETRY_BACKOFF": 5,
        "MAX_RETRY_DELAY": 3600,
        # How long a dispatcher owns the rows it claimed; a dispatcher that dies holding
        # them is taken over once this has passed. Keep it well above a batch's duration.
        "CLAIM_LEASE": timedelta(minutes=5),
        # How long a dispatcher may go without a pass (and rows may stay late) before the
        # status calls it stale; None: three POLL_INTERVALs, and at least a minute.
        "STALE_AFTER": None,
    },
    "ENGINE": {
        # Times one event is re-applied after losing an optimistic-concurrency race (with
        # exponential back-off, so the default bounds the wait at roughly 20 seconds).
        "MAX_CONFLICT_RETRIES": 100,
        # What one step may ask for: schedule_timeout() calls and ctx.publish() events. The
        # next call beyond is a ValueError, and the step writes nothing (its window is one
        # transaction, which must stay short).
        "MAX_TIMERS_PER_STEP": 1000,
        "MAX_EVENTS_PER_STEP": 1000,
        # How many synchronous deliveries may nest in one another (a step publishing an
        # event that reaches a saga whose step publishes again, ...); the step one level
        # deeper is a PublishDepthExceeded instead of a RecursionError.
        "MAX_PUBLISH_DEPTH": 16,
        # Events one saga may keep for its later steps (keep_early); an early event beyond
        # is ignored (reason "kept_limit") and logged, never an error for its publisher.
        "MAX_KEPT_EVENTS_PER_SAGA": 1000,
        # How long an event a keep_early wait awaits is kept for a key with no active saga
        # yet (a number of seconds or a timedelta); then it is discarded (not_awaited).
        "KEEP_EARLY_FOR": timedelta(days=1),
    },
    "CALENDARS": {},
    "API": {
        "READ_CONTENT_PERMISSION": None,
        "AUDIT_RECORDER": "bsft_saga.audit.ModelAuditRecorder",
    },
    "RETENTION": {
        # What purge_saga_data keeps: finished instances, retired timers and settled outbox
        # rows younger than this; also the de-duplication window of start events.
        "OLDER_THAN": timedelta(days=30),
        "KEEP_DEAD_LETTERED": True,
        # None: audit records are kept for ever.
        "AUDIT_OLDER_THAN": None,
    },
}

# Sections whose keys are the user's own names rather than our option names.
_FREE_FORM_SECTIONS = {"CALENDARS"}
# Top-level options that are a value, not a section.
_VALUES = {"MAX_PAYLOAD_BYTES"}


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
        try:
            return timedelta(seconds=value)
        except (OverflowError, ValueError):  # beyond timedelta's range, or NaN
            return None
    return None


def _positive_duration(value: Any) -> bool:
    delta = _as_timedelta(value)
    return delta is not None and delta > timedelta(0)


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
        if section in _VALUES:
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
    limit = raw.get("MAX_PAYLOAD_BYTES", DEFAULTS["MAX_PAYLOAD_BYTES"])
    if limit is not None and not _positive_int(limit):
        problems.append(
            ConfigProblem("MAX_PAYLOAD_BYTES", "must be a positive number of bytes, or None")
        )
    timeouts = _section(raw, "TIMEOUTS")
    for key in (
        "POLL_INTERVAL",
        "MAX_CATCH_UP_AGE",
        "CLAIM_LEASE",
        "RETRY_BACKOFF",
        "MAX_RETRY_DELAY",
    ):
        delta = _as_timedelta(timeouts[key])
        if delta is None or delta <= timedelta(0):
            problems.append(
                ConfigProblem(
                    f"TIMEOUTS.{key}", "must be a positive number of seconds or a timedelta"
                )
            )
    stale_after = timeouts["STALE_AFTER"]
    if stale_after is not None and not _positive_duration(stale_after):
        problems.append(
            ConfigProblem(
                "TIMEOUTS.STALE_AFTER",
                "must be None (three POLL_INTERVALs, at least a minute) or a positive number "
                "of seconds or a timedelta",
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
    engine = _section(raw, "ENGINE")
    for key in (
        "MAX_CONFLICT_RETRIES",
        "MAX_TIMERS_PER_STEP",
        "MAX_EVENTS_PER_STEP",
        "MAX_PUBLISH_DEPTH",
        "MAX_KEPT_EVENTS_PER_SAGA",
    ):
        if not _positive_int(engine[key]):
            problems.append(ConfigProblem(f"ENGINE.{key}", "must be a positive integer"))
    if not _positive_duration(engine["KEEP_EARLY_FOR"]):
        problems.append(
            ConfigProblem(
                "ENGINE.KEEP_EARLY_FOR", "must be a positive number of seconds or a timedelta"
            )
        )
    problems.extend(_retention_problems(_section(raw, "RETENTION")))
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


def _retention_problems(retention: Mapping[str, Any]) -> list[ConfigProblem]:
    problems = []
    older_than = _as_timedelta(retention["OLDER_THAN"])
    if older_than is None or older_than <= timedelta(0):
        problems.append(
            ConfigProblem(
                "RETENTION.OLDER_THAN", "must be a positive number of seconds or a timedelta"
            )
        )
    if not isinstance(retention["KEEP_DEAD_LETTERED"], bool):
        problems.append(ConfigProblem("RETENTION.KEEP_DEAD_LETTERED", "must be True or False"))
    audit = retention["AUDIT_OLDER_THAN"]
    audit_window = None if audit is None else _as_timedelta(audit)
    if audit is not None and (audit_window is None or audit_window <= timedelta(0)):
        problems.append(
            ConfigProblem(
                "RETENTION.AUDIT_OLDER_THAN",
                "must be None (keep every audit record) or a positive number of seconds "
                "or a timedelta",
            )
        )
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
    retry_backoff: timedelta
    max_retry_delay: timedelta
    claim_lease: timedelta
    #: ``STALE_AFTER``, resolved: a dispatcher whose last pass is older is stale.
    stale_after: timedelta


@dataclass(frozen=True)
class StepLimits:
    """``ENGINE``'s bounds on what one step may ask for."""

    max_timers: int
    max_events: int


@dataclass(frozen=True)
class RetentionSettings:
    """``RETENTION``: the defaults of ``purge_saga_data`` (command, task and function)."""

    older_than: timedelta
    keep_dead_lettered: bool
    audit_older_than: timedelta | None  # None: audit records are kept

    @classmethod
    def of(cls, retention: Mapping[str, Any]) -> RetentionSettings:
        audit = retention["AUDIT_OLDER_THAN"]
        return cls(
            older_than=_validated_timedelta(retention["OLDER_THAN"]),
            keep_dead_lettered=retention["KEEP_DEAD_LETTERED"],
            audit_older_than=None if audit is None else _validated_timedelta(audit),
        )


@dataclass(frozen=True)
class _Snapshot:
    """The typed view of one ``BSFT_SAGA`` value, built once after it validated."""

    raw: Mapping[str, Any]
    timeouts: TimeoutSettings
    max_conflict_retries: int
    max_publish_depth: int
    max_kept_events_per_saga: int
    keep_early_for: timedelta
    step_limits: StepLimits
    calendars: Mapping[str, Mapping[str, Any]]
    api: dict[str, Any]
    retention: RetentionSettings
    max_payload_bytes: int | None

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> _Snapshot:
        problems = validate(raw)
        if problems:
            raise ImproperlyConfigured("; ".join(str(p) for p in problems))
        timeouts = _section(raw, "TIMEOUTS")
        engine = _section(raw, "ENGINE")
        return cls(
            raw=raw,
            timeouts=TimeoutSettings(
                poll_interval=_validated_timedelta(timeouts["POLL_INTERVAL"]),
                batch_size=timeouts["BATCH_SIZE"],
                catch_up_policy=timeouts["CATCH_UP_POLICY"],
                max_catch_up_age=_validated_timedelta(timeouts["MAX_CATCH_UP_AGE"]),
                max_dispatch_attempts=timeouts["MAX_DISPATCH_ATTEMPTS"],
                retry_backoff=_validated_timedelta(timeouts["RETRY_BACKOFF"]),
                max_retry_delay=_validated_timedelta(timeouts["MAX_RETRY_DELAY"]),
                claim_lease=_validated_timedelta(timeouts["CLAIM_LEASE"]),
                stale_after=_stale_after(timeouts),
            ),
            max_conflict_retries=engine["MAX_CONFLICT_RETRIES"],
            max_publish_depth=engine["MAX_PUBLISH_DEPTH"],
            max_kept_events_per_saga=engine["MAX_KEPT_EVENTS_PER_SAGA"],
            keep_early_for=_validated_timedelta(engine["KEEP_EARLY_FOR"]),
            step_limits=StepLimits(
                max_timers=engine["MAX_TIMERS_PER_STEP"],
                max_events=engine["MAX_EVENTS_PER_STEP"],
            ),
            calendars=raw.get("CALENDARS", {}),
            api=_section(raw, "API"),
            retention=RetentionSettings.of(_section(raw, "RETENTION")),
            max_payload_bytes=raw.get("MAX_PAYLOAD_BYTES", DEFAULTS["MAX_PAYLOAD_BYTES"]),
        )


def _stale_after(timeouts: Mapping[str, Any]) -> timedelta:
    """``STALE_AFTER``, or by default three ``POLL_INTERVAL`` s and at least a minute: an idle
    dispatcher reports once per ``POLL_INTERVAL``, a busy one at each pass."""
    if timeouts["STALE_AFTER"] is not None:
        return _validated_timedelta(timeouts["STALE_AFTER"])
    return max(3 * _validated_timedelta(timeouts["POLL_INTERVAL"]), STALE_AFTER_AT_LEAST)


#: The least default ``STALE_AFTER`` (an explicit value may be shorter).
STALE_AFTER_AT_LEAST = timedelta(minutes=1)


def _validated_timedelta(value: Any) -> timedelta:
    delta = _as_timedelta(value)
    assert delta is not None  # validate() has rejected anything else
    return delta


_NOT_SET: Mapping[str, Any] = MappingProxyType({})


class SagaSettings:
    """Typed, validated view of ``settings.BSFT_SAGA``.

    The engine reads it on every event and the dispatcher on every row, so the view is
    built once per setting value: ``override_settings`` installs a new value, which is
    validated and typed afresh on its first access (and ``setting_changed`` drops the
    view, for a value edited in place).
    """

    def __init__(self) -> None:
        self._snapshot: _Snapshot | None = None

    def raw(self) -> Mapping[str, Any]:
        value = getattr(settings, SETTING_NAME, None)
        return _NOT_SET if value is None else value

    def reload(self) -> None:
        self._snapshot = None

    def _current(self) -> _Snapshot:
        raw = self.raw()
        snapshot = self._snapshot
        if snapshot is None or snapshot.raw is not raw:
            snapshot = self._snapshot = _Snapshot.of(raw)
        return snapshot

    @property
    def timeouts(self) -> TimeoutSettings:
        return self._current().timeouts

    @property
    def max_conflict_retries(self) -> int:
        return self._current().max_conflict_retries

    @property
    def max_publish_depth(self) -> int:
        return self._current().max_publish_depth

    @property
    def max_kept_events_per_saga(self) -> int:
        return self._current().max_kept_events_per_saga

    @property
    def keep_early_for(self) -> timedelta:
        return self._current().keep_early_for

    @property
    def step_limits(self) -> StepLimits:
        return self._current().step_limits

    @property
    def calendars(self) -> Mapping[str, Mapping[str, Any]]:
        return self._current().calendars

    @property
    def api(self) -> dict[str, Any]:
        return dict(self._current().api)

    @property
    def retention(self) -> RetentionSettings:
        return self._current().retention

    @property
    def max_payload_bytes(self) -> int | None:
        return self._current().max_payload_bytes


saga_settings = SagaSettings()


@receiver(setting_changed)
def _reload_saga_settings(*, setting: str, **kwargs: Any) -> None:
    if setting == SETTING_NAME:
        saga_settings.reload()
