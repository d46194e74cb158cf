"""How the admin shows a moment: to the second, in the current time zone, naming the zone.

Django's admin shows a ``DateTimeField`` in the locale's format ("Dec. 1, 2026, 2:20 p.m."):
no seconds and no zone, while a lease or a retry is a matter of seconds. Every bsft_saga
admin page shows a moment as :func:`bsft_saga.moments.format_moment` writes it
(``2026-12-01 14:20:05 CET``): the changelists, the change pages, the inlines, the journal,
the status panel (the template filter ``moment``) and the action pages.

:class:`MomentFieldsMixin` does it for the model fields of a ``ModelAdmin`` or an inline:
every ``DateTimeField`` named in its list columns, fieldsets or read-only fields is shown
through a :class:`MomentColumn`, so a field added later is shown the same way without
anyone remembering to.

:func:`format_duration` writes a length of time (an idle time, a lag) as people read it:
"42 s", "4 min 2 s", "3 h 0 min", "2 d 3 h", never "10800 s".
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any

from django.core.exceptions import FieldDoesNotExist
from django.db import models
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _

from bsft_saga.moments import EMPTY, format_moment

__all__ = [
    "MomentColumn",
    "MomentFieldsMixin",
    "format_duration",
    "format_moment",
    "moment_html",
]

MINUTE, HOUR, DAY = 60, 3600, 86400


def moment_html(value: datetime | str | None, empty: str = EMPTY) -> SafeString:
    """:func:`format_moment` as a ``<time>`` element (its ``datetime`` attribute in ISO
    8601); ``empty`` alone for ``None``."""
    text = format_moment(value, empty)
    if not isinstance(value, datetime):
        return format_html("{}", text)
    return format_html('<time datetime="{}">{}</time>', value.isoformat(), text)


def format_duration(seconds: float, decimals: int = 0) -> str:
    """``seconds`` in its two largest units: "42 s" under a minute (with ``decimals``
    places: "0.4 s"), then "4 min 2 s", "3 h 0 min", "2 d 3 h"; rounded to the second from
    a minute on. A negative length (a clock a little ahead) is shown as 0."""
    seconds = max(0.0, seconds)
    if round(seconds, decimals) < MINUTE:
        return _("%(seconds)s s") % {"seconds": f"{seconds:.{decimals}f}"}
    whole = round(seconds)
    if whole < HOUR:
        units = {"minutes": whole // MINUTE, "seconds": whole % MINUTE}
        return _("%(minutes)d min %(seconds)d s") % units
    if whole < DAY:
        return _("%(hours)d h %(minutes)d min") % {
            "hours": whole // HOUR,
            "minutes": whole % HOUR // MINUTE,
        }
    return _("%(days)d d %(hours)d h") % {"days": whole // DAY, "hours": whole % DAY // HOUR}


class MomentColumn:
    """A ``DateTimeField`` shown through :func:`moment_html`, standing in for its name.

    Django's admin looks a name up as a model field (and formats it its own way) before it
    asks the ``ModelAdmin``, so the field is replaced by this callable, which keeps what
    the name gave: the label (``short_description``), the sorting (``admin_order_field``),
    the CSS classes (``field-<name>``, ``column-<name>``) and the help text.
    """

    def __init__(self, field: models.DateTimeField[Any, Any], empty: str) -> None:
        self.__name__ = field.name
        self.short_description = field.verbose_name
        self.admin_order_field = field.name
        self.empty = empty

    def __call__(self, obj: models.Model) -> SafeString:
        return moment_html(getattr(obj, self.__name__), self.empty)

    def __str__(self) -> str:
        # The tabular inline's column header is rendered as "column-{{ field.name }}".
        return self.__name__

    def __repr__(self) -> str:
        return f"MomentColumn({self.__name__!r})"


@cache
def moment_column(model: type[models.Model], name: str, empty: str) -> MomentColumn | None:
    """The one column of ``model``'s field ``name`` (the admin matches fields by identity),
    or ``None`` if it is not a ``DateTimeField``."""
    try:
        field = model._meta.get_field(name)
    except FieldDoesNotExist:
        return None
    if not isinstance(field, models.DateTimeField):
        return None
    return MomentColumn(field, empty)


class MomentFieldsMixin:
    """``ModelAdmin`` or inline mixin: its ``DateTimeField``\\ s are shown by
    :func:`format_moment`, on the changelist, the change page and in the inline.

    It rewrites the names that ``get_list_display`` (and its links and sortable columns),
    ``get_fieldsets`` and ``get_readonly_fields`` return; an override of one of those in a
    subclass calls ``super()`` (the admin then finds the same :class:`MomentColumn` in each).
    """

    model: type[models.Model]

    def moment_columns(self, names: Sequence[Any]) -> list[Any]:
        """``names`` with each ``DateTimeField`` replaced by its :class:`MomentColumn`
        (also inside a tuple of fields shown on one line)."""
        empty = str(self.get_empty_value_display())  # type: ignore[attr-defined]
        shown: list[Any] = []
        for name in names:
            if isinstance(name, list | tuple):
                shown.append(tuple(self.moment_columns(name)))
            elif isinstance(name, str):
                shown.append(moment_column(self.model, name, empty) or name)
            else:
                shown.append(name)
        return shown

    def get_list_display(self, request: HttpRequest) -> Any:
        return self.moment_columns(super().get_list_display(request))  # type: ignore[misc]

    def get_list_display_links(self, request: HttpRequest, list_display: Any) -> Any:
        links = super().get_list_display_links(request, list_display)  # type: ignore[misc]
        return None if links is None else self.moment_columns(links)

    def get_sortable_by(self, request: HttpRequest) -> Any:
        return self.moment_columns(super().get_sortable_by(request))  # type: ignore[misc]

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        fieldsets = super().get_fieldsets(request, obj)  # type: ignore[misc]
        return [
            (title, {**options, "fields": self.moment_columns(options["fields"])})
            for title, options in fieldsets
        ]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.moment_columns(super().get_readonly_fields(request, obj))  # type: ignore[misc]
