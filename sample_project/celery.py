"""The sample project's Celery app: tasks from every installed app, and the drain on beat.

Run a worker with an embedded beat (development) or the two separately (production)::

    celery -A sample_project worker --beat -l info
    celery -A sample_project worker -l info
    celery -A sample_project beat -l info

``DJANGO_SETTINGS_MODULE`` defaults to ``sample_project.settings``; bsft_saga's own worker
test runs this same app against ``tests.settings``.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sample_project.settings")

#: The beat entry that fires saga timers and sweeps the outbox.
DRAIN_ENTRY = "drain-saga-timeouts"

app = Celery("sample_project")
# Every CELERY_* Django setting configures the app (CELERY_BROKER_URL -> broker_url, ...).
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# Current in the importing thread is not enough: a web server's request threads and the
# engine's after-commit hooks call ``deliver_event.delay`` from threads of their own.
app.set_default()


@app.on_after_configure.connect
def schedule_drain(sender: Celery, **kwargs: Any) -> None:
    """Run ``drain_saga_timeouts`` every ``BSFT_SAGA["DELIVERY"]["POLL_INTERVAL"]``.

    Connected to ``on_after_configure`` because the interval comes from Django settings,
    which cannot be read while this module is imported from ``settings.py``'s package.
    An entry of the same name in ``CELERY_BEAT_SCHEDULE`` wins.
    """
    from bsft_saga.conf import saga_settings

    entry = {
        "task": "bsft_saga.tasks.drain_saga_timeouts",
        "schedule": saga_settings.delivery.poll_interval,
    }
    # A new dict: Celery's default beat_schedule is one shared object.
    sender.conf.beat_schedule = {DRAIN_ENTRY: entry, **(sender.conf.beat_schedule or {})}
