"""The one clock seam: every timestamp bsft_saga writes or compares comes from here.

It reads ``django.utils.timezone.now`` at call time, so freezegun (and the
``SagaHarness``) moves it in every thread; the database clock is never used.
"""

from __future__ import annotations

import time
from datetime import datetime

from django.utils import timezone


def now() -> datetime:
    """Return the current aware UTC time."""
    return timezone.now()


def stopwatch() -> float:
    """Return seconds on a monotonic clock, for measuring intervals of real time.

    Not moved by freezegun (which replaces ``time.monotonic``): what it bounds is real work
    (how long a pass leaves rows uncommitted, how often a dispatcher reports), whatever a
    test does to the clock of timestamps.
    """
    if hasattr(time, "clock_gettime"):
        return time.clock_gettime(time.CLOCK_MONOTONIC)
    return time.monotonic()
