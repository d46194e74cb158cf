from __future__ import annotations

from django.apps import AppConfig


class CeleryCrashConfig(AppConfig):
    name = "tests.workers.celery_crash"
    label = "bsft_saga_tests_celery_crash"
    verbose_name = "bsft_saga tests: a receiver that kills the Celery worker"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from bsft_saga.signals import event_published
        from tests.workers.celery_crash.receivers import crash_once

        # After bsft_saga's own receiver (its app comes first in INSTALLED_APPS): the saga's
        # step has run in the delivery's transaction when the process dies, uncommitted.
        event_published.connect(crash_once, dispatch_uid="tests.celery_crash.crash_once")
