"""Include with ``path("api/sagas/", include("bsft_saga.api.urls"))``."""

from __future__ import annotations

from django.urls import path
from rest_framework.routers import SimpleRouter

from bsft_saga.api.views import SagaInstanceViewSet, SagaSchemaView, SagaStatusView

app_name = "bsft_saga"

router = SimpleRouter()
router.register("instances", SagaInstanceViewSet, basename="instance")

api_urls = [
    path("status/", SagaStatusView.as_view(), name="status"),
    *router.urls,
]

urlpatterns = [
    path("schema/", SagaSchemaView.as_view(urlconf=api_urls), name="schema"),
    *api_urls,
]
