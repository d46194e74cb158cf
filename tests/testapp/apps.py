from __future__ import annotations

from django.apps import AppConfig


class TestAppConfig(AppConfig):
    name = "tests.testapp"
    label = "testapp"
    default_auto_field = "django.db.models.BigAutoField"

    @property
    def saga_flows(self) -> list[type]:
        # Each test area keeps its flows in its own module's FLOWS list.
        from tests.testapp import (
            branch_flows,
            delayed_flows,
            dispatch_flows,
            flows,
            kept_flows,
            load_flows,
            loop_flows,
            model_flows,
            ops_flows,
            parcel_flows,
            timer_flows,
        )

        return [
            *flows.FLOWS,
            *timer_flows.FLOWS,
            *load_flows.FLOWS,
            *ops_flows.FLOWS,
            *parcel_flows.FLOWS,
            *dispatch_flows.FLOWS,
            *delayed_flows.FLOWS,
            *branch_flows.FLOWS,
            *loop_flows.FLOWS,
            *kept_flows.FLOWS,
            *model_flows.FLOWS,
        ]
