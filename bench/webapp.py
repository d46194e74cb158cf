"""The web pair's views and URLconf (bench/web.py), served by gunicorn with
bench/web_settings.py.

``POST publish/`` starts a saga through ``publish()`` with the step benchmark's start event
(``workloads.start_event``: ``BenchReminderFlow``'s start step sets the state and schedules
one reminder); ``POST by-hand/`` writes the same three rows by hand
(``baselines.start_by_hand``). Both answer 201 with an empty body once the rows are
committed, and take the correlation key from a fresh UUID, so that every request starts a
saga of its own. ``GET ready/`` answers 204 without touching the database: the bench's way
to see that the server listens.
"""

from __future__ import annotations

import uuid

from django.http import HttpRequest, HttpResponse
from django.urls import path
from django.views.decorators.http import require_GET, require_POST

from bench import baselines, workloads
from bsft_saga import publish


@require_POST
def publish_start(request: HttpRequest) -> HttpResponse:
    """Publish one start event: the engine writes the instance, its inbox row and the timer."""
    publish(workloads.start_event(uuid.uuid4().hex))
    return HttpResponse(status=201)


@require_POST
def start_by_hand(request: HttpRequest) -> HttpResponse:
    """Write the same three rows in one ``transaction.atomic()``."""
    baselines.start_by_hand(uuid.uuid4().hex, workloads.STEP_NOTE)
    return HttpResponse(status=201)


@require_GET
def ready(request: HttpRequest) -> HttpResponse:
    return HttpResponse(status=204)


urlpatterns = [
    path("publish/", publish_start),
    path("by-hand/", start_by_hand),
    path("ready/", ready),
]
