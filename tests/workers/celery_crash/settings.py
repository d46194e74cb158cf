"""``tests.settings`` plus the crashing receiver, for the worker of a Celery fault test.

``BSFT_SAGA_VISIBILITY_TIMEOUT`` (seconds) sets the Redis transport's
``visibility_timeout``: how long a message that a dead worker took and never acknowledged
stays hidden in Redis before a worker restores it to the queue.
"""

from __future__ import annotations

import os

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.workers.celery_crash.apps.CeleryCrashConfig"]

CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": int(os.environ.get("BSFT_SAGA_VISIBILITY_TIMEOUT", "3600")),
}
