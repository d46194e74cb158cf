"""Query filters of the instance list.

Every value either filters or is a 400 naming its parameter; none reaches the database in a
form it refuses (``tests/admin/test_hostile_queries.py`` walks them).
"""

from __future__ import annotations

from typing import Any

import django_filters
from django import forms
from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _
from django_filters import rest_framework as drf_filters
from django_filters.fields import IsoDateTimeField

from bsft_saga.db.datetimes import EARLIEST, LATEST, storable
from bsft_saga.models import SagaInstance

#: The largest value a PositiveIntegerField holds on every backend (PostgreSQL's integer).
_MAX_STORED_INT = 2**31 - 1


class StoredIntegerFilter(django_filters.NumberFilter):
    """An integer in the column's range (``99999999999999999999`` is not, and on SQLite it
    would overflow inside the query): anything else is a 400, never a query."""

    field_class = forms.IntegerField

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("min_value", 0)
        kwargs.setdefault("max_value", _MAX_STORED_INT)
        super().__init__(*args, **kwargs)


class BoundedIsoDateTimeField(IsoDateTimeField):
    """An ISO 8601 datetime within the range bsft_saga stores (``bsft_saga.db.datetimes``).

    ``9999-12-31T23:59:59-23:59`` parses, but it is in year 10000 in UTC: SQLite's adapter
    would raise ``OverflowError`` and PostgreSQL ``DataError`` (a 500). Out of range is a
    validation error instead, which the API answers with 400 naming the parameter.
    """

    default_error_messages = {
        "out_of_range": _("Enter a date and time between %(earliest)s and %(latest)s (UTC)."),
    }

    def to_python(self, value: Any) -> Any:
        parsed = super().to_python(value)
        if parsed is None:
            return parsed
        try:
            storable(parsed, field="the date", where="filter")
        except ValueError:
            raise ValidationError(
                self.error_messages["out_of_range"],
                code="out_of_range",
                params={"earliest": EARLIEST.date(), "latest": LATEST.date()},
            ) from None
        return parsed


class BoundedIsoDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = BoundedIsoDateTimeField


class SagaInstanceFilter(django_filters.FilterSet):
    """The stalled sagas' query is ``?is_complete=false&updated_before=<an hour ago>``."""

    saga_type = django_filters.CharFilter()
    saga_type_prefix = django_filters.CharFilter(field_name="saga_type", lookup_expr="startswith")
    correlation_key = django_filters.CharFilter()
    state_type = django_filters.CharFilter()
    is_complete = drf_filters.BooleanFilter()  # accepts true/false and 1/0
    created_after = BoundedIsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = BoundedIsoDateTimeFilter(field_name="created_at", lookup_expr="lt")
    updated_after = BoundedIsoDateTimeFilter(field_name="updated_at", lookup_expr="gte")
    updated_before = BoundedIsoDateTimeFilter(field_name="updated_at", lookup_expr="lt")
    min_step_index = StoredIntegerFilter(field_name="step_index", lookup_expr="gte")
    flow_version = StoredIntegerFilter()

    class Meta:
        model = SagaInstance
        fields: list[str] = []
