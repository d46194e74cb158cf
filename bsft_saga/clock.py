"""The one clock seam: every timestamp bsft_saga writes or compares comes from here.

It reads ``django.utils.timezone.now`` at call time, so freezegun (and the
``SagaHarness``) moves it in every thread; the database clock is never used.
"""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone


def now() -> datetime:
    """Return the current aware UTC time."""
    return timezone.now()
