from __future__ import annotations

from django.apps import AppConfig, apps
from django.utils.module_loading import autodiscover_modules
from django.utils.translation import gettext_lazy as _


class BsftSagaConfig(AppConfig):
    name = "bsft_saga"
    label = "bsft_saga"
    verbose_name = _("Sagas")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from bsft_saga import checks  # noqa: F401  (registers the system checks)
        from bsft_saga.engine import deadlines  # noqa: F401  (registers bsft_saga's own event)
        from bsft_saga.engine.receiver import connect_engine
        from bsft_saga.flows.registry import flow_registry

        # Every stored event type must resolve in every process, including a fresh worker
        # that only drains timers: import each installed app's ``events`` module, as the
        # admin imports ``admin.py``.
        autodiscover_modules("events")
        flow_registry.load(apps.get_app_configs())
        connect_engine()
        from bsft_saga.tasks import connect_task_receivers

        connect_task_receivers()
        from bsft_saga.telemetry import install_gauges

        install_gauges()
