from __future__ import annotations

from django.apps import AppConfig


class EventsAppConfig(AppConfig):
    """An app with an ``events`` module that nothing imports: bsft_saga must find it."""

    name = "tests.eventsapp"
    label = "bsft_saga_tests_eventsapp"
