"""The ``BSFT_SAGA`` setting: defaults, validation and typed access.

Each key is declared once, as an ``Option`` of its section class (``DeliverySettings``,
``TimerSettings``, ...): its name, its default, the function that reads its value and what
it means. ``DEFAULTS``, ``validate()`` and the typed attributes of ``saga_settings`` all come
from these declarations.

``saga_settings`` follows ``override_settings``: it types and validates each value of
``settings.BSFT_SAGA`` once, on first access. Nothing here reads settings at import time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from types import MappingProxyType
from typing import Any, ClassVar, Generic, TypeVar, overload

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

SETTING_NAME = "BSFT_SAGA"

CATCH_UP_POLICIES = ("fire_all", "fire_latest_per_saga", "skip_beyond_max_age")
#: What a delivered row's span makes of the trace context stored with the row.
TRACE_PARENTS = ("link", "stored")

#: The least default ``STALE_AFTER`` (an explicit value may be shorter).
STALE_AFTER_AT_LEAST = timedelta(minutes=1)

T = TypeVar("T")


# --- How a value is read: the typed value, or a ValueError saying what it must be ---------


def positive_int(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    raise ValueError("must be a positive integer")


def positive_duration(value: Any) -> timedelta:
    """A ``timedelta``, or a number of seconds (``int`` or ``float``), above zero."""
    delta = None
    if isinstance(value, timedelta):
        delta = value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        try:
            delta = timedelta(seconds=value)
        except (OverflowError, ValueError):  # beyond timedelta's range, or NaN
            delta = None
    if delta is None or delta <= timedelta(0):
        raise ValueError("must be a positive number of seconds or a timedelta")
    return delta


def flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise ValueError("must be True or False")


def as_given(value: Any) -> Any:
    """Any value, kept as it is (a dotted path or a permission, checked where it is used)."""
    return value


def one_of(*choices: str) -> Callable[[Any], str]:
    def choice(value: Any) -> str:
        if value in choices:
            return str(value)
        raise ValueError(f"{value!r} is not one of {', '.join(choices)}")

    return choice


def or_none(read: Callable[[Any], T], none_means: str) -> Callable[[Any], T | None]:
    """``read``, or ``None`` (which means ``none_means``)."""

    def read_or_none(value: Any) -> T | None:
        if value is None:
            return None
        try:
            return read(value)
        except ValueError as error:
            what = str(error).removeprefix("must be ")
            raise ValueError(f"must be None ({none_means}) or {what}") from None

    return read_or_none


def payload_limit(value: Any) -> int | None:
    if value is None:
        return None
    try:
        return positive_int(value)
    except ValueError:
        raise ValueError("must be a positive number of bytes, or None") from None


# --- Declarations -------------------------------------------------------------------------


@dataclass(frozen=True)
class Option(Generic[T]):
    """One key of ``BSFT_SAGA``: its name, its default, how its value is read, its meaning.

    Declared as an attribute of a ``Section`` subclass, it reads as the typed value on an
    instance of that section: ``saga_settings.delivery.batch_size`` is the ``int`` of
    ``BSFT_SAGA["DELIVERY"]["BATCH_SIZE"]``, or of its default.
    """

    key: str
    #: As a user would write it (``5`` for five seconds); read by ``read`` like any value.
    default: Any
    #: The typed value of what the user wrote; a ``ValueError`` says what it must be.
    read: Callable[[Any], T]
    doc: str

    @overload
    def __get__(self, section: None, owner: type[Section]) -> Option[T]: ...

    @overload
    def __get__(self, section: Section, owner: type[Section]) -> T: ...

    def __get__(self, section: Section | None, owner: type[Section]) -> Option[T] | T:
        if section is None:
            return self  # on the class: the declaration itself
        value: T = section.values[self.key]
        return value


class Section:
    """One dict of ``BSFT_SAGA``, typed: each ``Option`` declared on a subclass is one key.

    An instance holds the values of one setting, already read; it is immutable and compares
    by its values.
    """

    name: ClassVar[str]
    #: The typed value of each key, by its name (``"BATCH_SIZE"``).
    values: Mapping[str, Any]

    def __init__(self, values: Mapping[str, Any]) -> None:
        object.__setattr__(self, "values", MappingProxyType(dict(values)))

    @classmethod
    def options(cls) -> list[Option[Any]]:
        """The section's keys, in the order they are declared."""
        return [value for value in vars(cls).values() if isinstance(value, Option)]

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {option.key: option.default for option in cls.options()}

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{SETTING_NAME} settings are read-only")

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.values == self.values

    def __hash__(self) -> int:
        return hash((type(self), tuple(self.values.items())))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict(self.values)!r})"


class DeliverySettings(Section):
    """``BSFT_SAGA["DELIVERY"]``: how a pass claims, retries and gives up on a row, timers
    and outbox rows alike."""

    name = "DELIVERY"

    poll_interval = Option(
        "POLL_INTERVAL", 5, positive_duration, "How often the drain should run (seconds)."
    )
    batch_size = Option(
        "BATCH_SIZE", 100, positive_int, "Due timers, and outbox rows, claimed per pass."
    )
    max_dispatch_attempts = Option(
        "MAX_DISPATCH_ATTEMPTS",
        10,
        positive_int,
        "Failed attempts after which a timer or an outbox row is dead-lettered.",
    )
    # Each wait is jittered down by up to a fifth.
    retry_backoff = Option(
        "RETRY_BACKOFF",
        5,
        positive_duration,
        "The wait after a row's first failed attempt; it doubles with every further one.",
    )
    max_retry_delay = Option(
        "MAX_RETRY_DELAY", 3600, positive_duration, "The cap of that doubling wait."
    )
    # A dispatcher that dies holding rows is taken over once its lease has passed.
    claim_lease = Option(
        "CLAIM_LEASE",
        timedelta(minutes=5),
        positive_duration,
        "How long a dispatcher owns the rows it claimed; well above a batch's duration.",
    )
    configured_stale_after = Option(
        "STALE_AFTER",
        None,
        or_none(positive_duration, "three POLL_INTERVALs, at least a minute"),
        "How long a dispatcher may go without a pass before the status calls it stale.",
    )

    @property
    def stale_after(self) -> timedelta:
        """``STALE_AFTER``, or by default three ``POLL_INTERVAL`` s and at least a minute: an
        idle dispatcher reports once per ``POLL_INTERVAL``, a busy one at each pass."""
        if self.configured_stale_after is not None:
            return self.configured_stale_after
        return max(3 * self.poll_interval, STALE_AFTER_AT_LEAST)


class TimerSettings(Section):
    """``BSFT_SAGA["TIMEOUTS"]``: what only timers have, the catch-up after an outage."""

    name = "TIMEOUTS"

    catch_up_policy = Option(
        "CATCH_UP_POLICY",
        "fire_all",
        one_of(*CATCH_UP_POLICIES),
        "What a pass does with timers that fell due while nothing drained.",
    )
    max_catch_up_age = Option(
        "MAX_CATCH_UP_AGE",
        timedelta(days=1),
        positive_duration,
        'The age limit of "skip_beyond_max_age".',
    )


class EngineSettings(Section):
    """``BSFT_SAGA["ENGINE"]``: the bounds of what one event, one step and one saga may do."""

    name = "ENGINE"

    # With exponential back-off, the default bounds the wait at roughly 20 seconds.
    max_conflict_retries = Option(
        "MAX_CONFLICT_RETRIES",
        100,
        positive_int,
        "Times one event is re-applied after losing an optimistic-concurrency race.",
    )
    # The next call beyond is a ValueError and the step writes nothing: its window is one
    # transaction, which must stay short.
    max_timers_per_step = Option(
        "MAX_TIMERS_PER_STEP", 1000, positive_int, "schedule_timeout() calls one step may make."
    )
    max_events_per_step = Option(
        "MAX_EVENTS_PER_STEP", 1000, positive_int, "ctx.publish() events one step may publish."
    )
    # The step one level deeper is a PublishDepthExceeded instead of a RecursionError.
    max_publish_depth = Option(
        "MAX_PUBLISH_DEPTH",
        16,
        positive_int,
        "How many synchronous deliveries may nest in one another.",
    )
    # An early event beyond is ignored (reason "kept_limit") and logged, never an error for
    # its publisher.
    max_kept_events_per_saga = Option(
        "MAX_KEPT_EVENTS_PER_SAGA",
        1000,
        positive_int,
        "Events one saga may keep for its later steps (keep_early).",
    )
    # Then it is discarded (not_awaited).
    keep_early_for = Option(
        "KEEP_EARLY_FOR",
        timedelta(days=1),
        positive_duration,
        "How long an awaited event is kept for a key with no active saga yet.",
    )


class ApiSettings(Section):
    """``BSFT_SAGA["API"]``: who may read saga content over HTTP, and who records it."""

    name = "API"

    read_content_permission = Option(
        "READ_CONTENT_PERMISSION",
        None,
        as_given,
        "The permission that reads state and timer payloads; None: the route is not served.",
    )
    audit_recorder = Option(
        "AUDIT_RECORDER",
        "bsft_saga.audit.ModelAuditRecorder",
        as_given,
        "Dotted path of the class that records each read of saga content.",
    )


class RetentionSettings(Section):
    """``BSFT_SAGA["RETENTION"]``: the defaults of ``purge_saga_data`` (command, task and
    function)."""

    name = "RETENTION"

    # Also the de-duplication window of start events.
    older_than = Option(
        "OLDER_THAN",
        timedelta(days=30),
        positive_duration,
        "Finished instances, retired timers and settled outbox rows younger are kept.",
    )
    keep_dead_lettered = Option(
        "KEEP_DEAD_LETTERED", True, flag, "Keep every dead-lettered row whatever its age."
    )
    audit_older_than = Option(
        "AUDIT_OLDER_THAN",
        None,
        or_none(positive_duration, "keep every audit record"),
        "Purge audit records older than this; None: they are kept for ever.",
    )


class TelemetrySettings(Section):
    """``BSFT_SAGA["TELEMETRY"]``: how the spans of a delivered row join the trace that
    wrote it."""

    name = "TELEMETRY"

    # "link": the span belongs to the trace of the pass delivering the row and links to
    # the stored one; "stored": the stored context is its parent (one trace, however long).
    trace_parent = Option(
        "TRACE_PARENT",
        "link",
        one_of(*TRACE_PARENTS),
        "What a timer's or an outbox row's span makes of the trace that wrote the row.",
    )


#: The largest encoded event (compact UTF-8 JSON, in bytes) publish() and schedule_timeout()
#: accept; every pass that claims a row reads it back.
MAX_PAYLOAD_BYTES = Option(
    "MAX_PAYLOAD_BYTES", 262144, payload_limit, "The largest encoded event; None: no limit."
)

SECTIONS: tuple[type[Section], ...] = (
    DeliverySettings,
    TimerSettings,
    EngineSettings,
    ApiSettings,
    RetentionSettings,
    TelemetrySettings,
)
#: A section whose keys are the user's own names (calendar keys), not our option names.
CALENDARS = "CALENDARS"

#: Keys of ``DELIVERY`` that were ``TIMEOUTS`` keys before the outbox shared them; the old
#: place is still read, with the system-check warning ``bsft_saga.W003``.
MOVED_TO_DELIVERY: tuple[str, ...] = tuple(o.key for o in DeliverySettings.options())

DEFAULTS: dict[str, Any] = {
    MAX_PAYLOAD_BYTES.key: MAX_PAYLOAD_BYTES.default,
    **{section.name: section.defaults() for section in SECTIONS},
    CALENDARS: {},
}


# --- Reading one value of BSFT_SAGA ---------------------------------------------------------


@dataclass(frozen=True)
class ConfigProblem:
    """One thing wrong with ``BSFT_SAGA``; ``path`` is like ``DELIVERY.BATCH_SIZE``."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{SETTING_NAME}[{self.path}]: {self.message}"


def setting_of(section: str, key: str) -> str:
    """How a user writes one key in their settings: ``BSFT_SAGA["DELIVERY"]["BATCH_SIZE"]``."""
    return f'{SETTING_NAME}["{section}"]["{key}"]'


def moved_keys(raw: Any) -> list[str]:
    """The ``DELIVERY`` keys ``raw`` still sets under ``TIMEOUTS`` (and not also in
    ``DELIVERY``, which is an error instead)."""
    timers, delivery = _given(raw, TimerSettings.name), _given(raw, DeliverySettings.name)
    return [key for key in MOVED_TO_DELIVERY if key in timers and key not in delivery]


def _given(raw: Any, section: str) -> Mapping[str, Any]:
    """What ``raw`` sets in ``section``; nothing if either is not a dict."""
    value = raw.get(section) if isinstance(raw, Mapping) else None
    return value if isinstance(value, Mapping) else {}


class _Reader:
    """Reads one ``BSFT_SAGA`` value, collecting every problem rather than stopping at the
    first, so that ``manage.py check`` lists them all."""

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self.raw = raw
        self.problems: list[ConfigProblem] = []

    def problem(self, path: str, message: str) -> None:
        self.problems.append(ConfigProblem(path, message))

    def check_layout(self) -> None:
        """Every section is known and a dict, and every key of a section is one of its own."""
        known = [MAX_PAYLOAD_BYTES.key, CALENDARS, *(section.name for section in SECTIONS)]
        by_name = {section.name: section for section in SECTIONS}
        for name, value in self.raw.items():
            if name not in known:
                self.problem(name, f"unknown section; expected one of {sorted(known)}")
            elif name in by_name and not isinstance(value, Mapping):
                self.problem(name, "must be a dict")
            elif name in by_name:
                self.check_keys(by_name[name], value)

    def check_keys(self, section: type[Section], given: Mapping[str, Any]) -> None:
        expected = sorted(option.key for option in section.options())
        # The keys that moved are still read from their old place for one release.
        accepted = [*expected, *MOVED_TO_DELIVERY] if section is TimerSettings else expected
        for key in given:
            if key not in accepted:
                self.problem(f"{section.name}.{key}", f"unknown option; expected one of {expected}")

    def section(self, section: type[Section]) -> Section:
        values = {}
        for option in section.options():
            path, value = self.where(section, option)
            values[option.key] = self.read(path, option, value)
        return section(values)

    def where(self, section: type[Section], option: Option[Any]) -> tuple[str, Any]:
        """The path and value of one key: where the user set it, or its default."""
        given = _given(self.raw, section.name)
        old = _given(self.raw, TimerSettings.name) if section is DeliverySettings else {}
        path = f"{section.name}.{option.key}"
        if option.key in given and option.key in old:
            self.problem(
                path,
                f"set twice, here and as {setting_of(TimerSettings.name, option.key)}; keep "
                f"only {setting_of(section.name, option.key)}",
            )
        if option.key in given:
            return path, given[option.key]
        if option.key in old:
            return f"{TimerSettings.name}.{option.key}", old[option.key]
        return path, option.default

    def read(self, path: str, option: Option[T], value: Any) -> T | None:
        try:
            return option.read(value)
        except ValueError as error:
            self.problem(path, str(error))
            return None

    def check_calendars(self) -> None:
        calendars = self.raw.get(CALENDARS, {})
        if not isinstance(calendars, Mapping):
            self.problem(CALENDARS, "must be a dict")
            return
        for key, spec in calendars.items():
            if not isinstance(spec, Mapping) or not isinstance(spec.get("BACKEND"), str):
                self.problem(f"{CALENDARS}.{key}", "must be a dict with a dotted-path 'BACKEND'")
            elif not isinstance(spec.get("OPTIONS", {}), Mapping):
                self.problem(f"{CALENDARS}.{key}.OPTIONS", "must be a dict")


@dataclass(frozen=True)
class _Snapshot:
    """The typed view of one ``BSFT_SAGA`` value, built once after it validated."""

    raw: Mapping[str, Any]
    sections: Mapping[type[Section], Section]
    calendars: Mapping[str, Mapping[str, Any]]
    max_payload_bytes: int | None

    @classmethod
    def read(cls, raw: Mapping[str, Any]) -> tuple[_Snapshot, list[ConfigProblem]]:
        """The typed view of ``raw`` and every problem in it (the view is only of use when
        there is none)."""
        reader = _Reader(raw)
        reader.check_layout()
        limit = reader.read(
            MAX_PAYLOAD_BYTES.key,
            MAX_PAYLOAD_BYTES,
            raw.get(MAX_PAYLOAD_BYTES.key, MAX_PAYLOAD_BYTES.default),
        )
        sections = {section: reader.section(section) for section in SECTIONS}
        reader.check_calendars()
        calendars = raw.get(CALENDARS, {})
        return cls(raw, sections, calendars, limit), reader.problems

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> _Snapshot:
        snapshot, problems = cls.read(raw)
        if problems:
            raise ImproperlyConfigured("; ".join(str(p) for p in problems))
        return snapshot


def validate(raw: Any) -> list[ConfigProblem]:
    """Return every problem in a ``BSFT_SAGA`` value (empty when it is valid)."""
    if raw is None:
        return []
    if not isinstance(raw, Mapping):
        return [ConfigProblem("", f"must be a dict, not {type(raw).__name__}")]
    return _Snapshot.read(raw)[1]


_NOT_SET: Mapping[str, Any] = MappingProxyType({})

S = TypeVar("S", bound=Section)


class SagaSettings:
    """Typed, validated view of ``settings.BSFT_SAGA``.

    One attribute per section, each key of it an attribute of that:
    ``saga_settings.delivery.poll_interval`` (a ``timedelta``), ``.timers.catch_up_policy``,
    ``.engine.max_conflict_retries``, ``.api.read_content_permission``,
    ``.retention.older_than``, ``.telemetry.trace_parent``; ``.calendars`` and
    ``.max_payload_bytes`` as they are. A ``DELIVERY`` key still set under ``TIMEOUTS`` is
    read as its ``DELIVERY`` key.

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

    def _section(self, section: type[S]) -> S:
        value = self._current().sections[section]
        assert isinstance(value, section)
        return value

    @property
    def delivery(self) -> DeliverySettings:
        return self._section(DeliverySettings)

    @property
    def timers(self) -> TimerSettings:
        return self._section(TimerSettings)

    @property
    def engine(self) -> EngineSettings:
        return self._section(EngineSettings)

    @property
    def api(self) -> ApiSettings:
        return self._section(ApiSettings)

    @property
    def retention(self) -> RetentionSettings:
        return self._section(RetentionSettings)

    @property
    def telemetry(self) -> TelemetrySettings:
        return self._section(TelemetrySettings)

    @property
    def calendars(self) -> Mapping[str, Mapping[str, Any]]:
        return self._current().calendars

    @property
    def max_payload_bytes(self) -> int | None:
        return self._current().max_payload_bytes


saga_settings = SagaSettings()


@receiver(setting_changed)
def _reload_saga_settings(*, setting: str, **kwargs: Any) -> None:
    if setting == SETTING_NAME:
        saga_settings.reload()
