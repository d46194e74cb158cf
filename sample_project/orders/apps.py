from __future__ import annotations

from django.apps import AppConfig


class OrdersConfig(AppConfig):
    """The sample shop. bsft_saga collects the flows listed in ``saga_flows``."""

    name = "sample_project.orders"
    label = "orders"
    verbose_name = "Orders"
    default_auto_field = "django.db.models.BigAutoField"
    saga_flows = [
        "sample_project.orders.flows.QuoteFlow",
        "sample_project.orders.flows.OrderFulfillmentFlow",
    ]

    def ready(self) -> None:
        from sample_project.orders import receivers

        receivers.connect()
