"""URLs of the sample project: the admin, and bsft_saga's read API when it is installed."""

from __future__ import annotations

from importlib.util import find_spec

from django.contrib import admin
from django.urls import URLPattern, URLResolver, include, path


def _has_module(name: str) -> bool:
    try:
        return find_spec(name) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


urlpatterns: list[URLPattern | URLResolver] = [path("admin/", admin.site.urls)]

if _has_module("bsft_saga.api.urls"):
    urlpatterns.append(path("api/sagas/", include("bsft_saga.api.urls")))
