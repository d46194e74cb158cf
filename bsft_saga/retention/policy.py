"""The windows of one purge, turned into absolute cutoffs measured from one ``now``."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final, Literal

from bsft_saga import clock
from bsft_saga.conf import saga_settings

#: The shortest retention window that keeps the de-duplication of start events
#: meaningful, whatever ``MAX_CATCH_UP_AGE`` is (system check ``bsft_saga.W040``).
MINIMUM_SAFE_WINDOW: Final = timedelta(days=1)


class _FromSettings(enum.Enum):
    TOKEN = "from settings"


#: "Use the ``RETENTION`` setting": the default of ``audit_older_than``, for which ``None``
#: already means "keep every audit record".
FROM_SETTINGS: Final = _FromSettings.TOKEN

AuditWindow = timedelta | None | Literal[_FromSettings.TOKEN]


@dataclass(frozen=True)
class RetentionPolicy:
    """What one purge may delete: rows older than ``cutoff`` (audit: ``audit_cutoff``).

    ``keep_dead_lettered`` keeps every dead letter whatever its age, with the finished
    instance it belongs to. ``audit_cutoff`` is ``None`` when audit records are kept.
    """

    cutoff: datetime
    keep_dead_lettered: bool
    audit_cutoff: datetime | None

    @classmethod
    def build(
        cls,
        *,
        older_than: timedelta | None = None,
        keep_dead_lettered: bool | None = None,
        audit_older_than: AuditWindow = FROM_SETTINGS,
        now: datetime | None = None,
    ) -> RetentionPolicy:
        """Resolve omitted windows from ``BSFT_SAGA["RETENTION"]`` and measure them from ``now``.

        ``WindowError`` (a ``ValueError``) names the argument when a window is negative or
        reaches back before the year 1.
        """
        defaults = saga_settings.retention
        moment = now or clock.now()
        if audit_older_than is FROM_SETTINGS:
            audit_older_than = defaults.audit_older_than
        return cls(
            cutoff=_cutoff(
                moment, defaults.older_than if older_than is None else older_than, "older_than"
            ),
            keep_dead_lettered=(
                defaults.keep_dead_lettered if keep_dead_lettered is None else keep_dead_lettered
            ),
            audit_cutoff=(
                None
                if audit_older_than is None
                else _cutoff(moment, audit_older_than, "audit_older_than")
            ),
        )


def minimum_safe_window() -> timedelta:
    """The shortest ``OLDER_THAN`` that still outlasts every redelivery of a start event.

    A timer fires up to ``MAX_CATCH_UP_AGE`` late after an outage, and retries and outbox
    redeliveries take hours rather than days: a finished instance purged sooner than this
    lets a redelivered start event start its saga again.
    """
    return max(saga_settings.timers.max_catch_up_age, MINIMUM_SAFE_WINDOW)


class WindowError(ValueError):
    """A retention window that cannot be measured; ``argument`` names its parameter."""

    def __init__(self, argument: str, problem: str) -> None:
        super().__init__(f"{argument} {problem}")
        self.argument = argument
        self.problem = problem


def _cutoff(now: datetime, window: timedelta, argument: str) -> datetime:
    if not isinstance(window, timedelta):
        raise TypeError(f"{argument} must be a timedelta, got {window!r}")
    if window < timedelta(0):
        raise WindowError(argument, f"must not be negative, got {window!r}")
    try:
        return now - window
    except OverflowError:
        raise WindowError(argument, f"reaches back before the year 1: {window!r}") from None
