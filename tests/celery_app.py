"""The Celery app of the test process, configured from ``tests.settings`` (eager by default).

The real worker tests start ``celery -A sample_project`` in a child process instead.
"""

from __future__ import annotations

from celery import Celery

app = Celery("bsft_saga_tests")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.set_default()
