"""How long a row waits after a failed attempt."""

from __future__ import annotations

import random
from datetime import timedelta

# Each wait is drawn from [JITTER * d, d]: rows that failed together (a receiver that was
# down for everybody) come back spread out instead of in one burst.
JITTER = 0.8


def retry_delay(attempts: int, *, base: timedelta, cap: timedelta) -> timedelta:
    """The wait after the ``attempts``-th failed attempt (1 for the first failure).

    ``d = min(base * 2**(attempts - 1), cap)``, jittered to between 0.8 and 1.0 times ``d``.
    """
    if attempts < 1:
        raise ValueError(f"attempts counts failures from 1, got {attempts}")
    # Doubling a timedelta past ~2**35 days overflows; the cap is reached long before that.
    exponent = min(attempts - 1, 64)
    ceiling = cap.total_seconds()
    seconds = min(base.total_seconds() * 2.0**exponent, ceiling)
    return timedelta(seconds=random.uniform(JITTER * seconds, seconds))
