"""Query filters of the instance list."""

from __future__ import annotations

import django_filters
from django import forms
from django_filters import rest_framework as drf_filters

from bsft_saga.models import SagaInstance

#: The largest value a PositiveIntegerField holds on every backend (PostgreSQL's integer).
_MAX_STORED_INT = 2**31 - 1


class StoredIntegerFilter(django_filters.NumberFilter):
    """An exact integer in the column's range: anything else is a 400, never a query."""

    field_class = forms.IntegerField

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("min_value", 0)
        kwargs.setdefault("max_value", _MAX_STORED_INT)
        super().__init__(*args, **kwargs)


class SagaInstanceFilter(django_filters.FilterSet):
    """The stall query is ``?is_complete=false&updated_before=<an hour ago>``."""

    saga_type = django_filters.CharFilter()
    saga_type_prefix = django_filters.CharFilter(field_name="saga_type", lookup_expr="startswith")
    correlation_key = django_filters.CharFilter()
    state_type = django_filters.CharFilter()
    is_complete = drf_filters.BooleanFilter()  # accepts true/false and 1/0
    created_after = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="lt")
    updated_after = django_filters.IsoDateTimeFilter(field_name="updated_at", lookup_expr="gte")
    updated_before = django_filters.IsoDateTimeFilter(field_name="updated_at", lookup_expr="lt")
    min_step_index = django_filters.NumberFilter(field_name="step_index", lookup_expr="gte")
    flow_version = StoredIntegerFilter()

    class Meta:
        model = SagaInstance
        fields: list[str] = []
