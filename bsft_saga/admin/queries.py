"""What a changelist URL may ask of the database: no lookups into content, no 500s.

Three guards for the operational admin (``bsft_saga.admin``), all mixed into its base class:

- **Content lookups are refused.** Django's admin lets a URL filter on any local field
  (``?state__total=1234.56``, ``?last_error__startswith=V``). On a content field that is an
  oracle: whoever may see the list can test values inside state, payloads and error
  messages without ever opening a page that the audit records, and extract them a character
  at a time. ``lookup_allowed`` refuses every lookup on or through a content field, for
  every user, superusers included; Django answers ``DisallowedModelAdminLookup`` with 400.
- **Only the lookups the page itself produces are accepted.** Any other lookup on a local
  field would reach the database too: ``?saga_type__regex=(.*){9}X`` runs in Python's
  backtracking ``re`` on SQLite (13 seconds for that one request) and in PostgreSQL's regex
  engine. A URL may carry exact matches on the columns the list shows or filters by, and
  what its own filters, date drill-down and links write (:func:`url_lookups`); anything
  else is refused like a content lookup, with 400, for every user.
- **Hostile values are an invalid filter, not a crash.** A date the database cannot hold
  (``9999-12-31T23:59:59-23:59`` is in year 10000 in UTC), a year of twenty digits, or a
  NUL byte (which PostgreSQL refuses in text, while SQLite takes it) would fail inside the
  query and answer 500. ``GuardedChangeList`` turns those failures into
  ``IncorrectLookupParameters``, which the admin answers with its usual redirect to
  ``?e=1``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib.admin import SimpleListFilter
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.utils import get_fields_from_path
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import FieldDoesNotExist
from django.db import DatabaseError, connections, models, transaction
from django.db.models import Q
from django.db.models.constants import LOOKUP_SEP
from django.http import HttpRequest

from bsft_saga.db.datetimes import readable_q
from bsft_saga.models import SagaInstance, SagaKeptEvent, SagaOutboxMessage, SagaTimeout

if TYPE_CHECKING:
    from django.db.models import QuerySet

__all__ = [
    "CONTENT_FIELDS",
    "ContentLookupGuardMixin",
    "GuardedChangeList",
    "touches_content",
    "url_lookups",
]

#: The columns that hold saga content: state, payloads, and error messages (which quote
#: payloads). Shown only to content readers, audited, and never filterable from a URL.
CONTENT_FIELDS: dict[type[models.Model], frozenset[str]] = {
    SagaInstance: frozenset({"state"}),
    SagaTimeout: frozenset({"payload", "last_error", "dead_letter_reason"}),
    SagaOutboxMessage: frozenset({"payload", "last_error"}),
    SagaKeptEvent: frozenset({"payload", "last_error"}),
}


def touches_content(model: type[models.Model], lookup: str) -> bool:
    """Whether the ORM ``lookup`` on ``model`` reads a content field (directly, through a
    relation, or through a key or transform of one)."""
    current: type[models.Model] | None = model
    for part in lookup.split(LOOKUP_SEP):
        if current is None:
            return False
        try:
            field = current._meta.get_field(part)
        except FieldDoesNotExist:
            return False  # a lookup or transform name ("exact", "year") ends the path
        if field.name in CONTENT_FIELDS.get(current, frozenset()):
            return True
        if not field.is_relation:
            return False  # what follows are transforms of a plain field
        current = field.related_model if isinstance(field.related_model, type) else None
    return False


def url_lookups(model_admin: Any, request: HttpRequest | None) -> frozenset[str]:
    """The lookups a URL of ``model_admin``'s changelist may carry.

    - ``column`` and ``column__exact`` for each model field the list shows (a display
      method counts as the field it sorts by) or filters by;
    - what each list filter writes: a ``SimpleListFilter``'s parameter, a field filter's
      ``__exact`` and ``__isnull`` (``__<pk>__exact`` for a relation, ``__gte`` and ``__lt``
      for a date);
    - the date drill-down's ``__year``, ``__month`` and ``__day``;
    - ``model_admin.url_lookups``: what the admin's own links write (e.g. an instance page's
      link to its timers).
    """
    model = model_admin.model
    if request is None:
        shown, filters = model_admin.list_display, model_admin.list_filter
    else:
        shown, filters = model_admin.get_list_display(request), model_admin.get_list_filter(request)
    allowed = set(getattr(model_admin, "url_lookups", ()))
    for name in shown:
        column = _column(model_admin, name)
        if column is not None:
            allowed |= {column, f"{column}{LOOKUP_SEP}exact"}
    for item in filters:
        if isinstance(item, type) and issubclass(item, SimpleListFilter):
            allowed.add(str(item.parameter_name))
        elif isinstance(item, str | list | tuple):
            allowed |= _filter_lookups(model, item[0] if isinstance(item, list | tuple) else item)
    hierarchy = model_admin.date_hierarchy
    if hierarchy:
        allowed |= {f"{hierarchy}{LOOKUP_SEP}{part}" for part in ("year", "month", "day")}
    return frozenset(allowed)


def _column(model_admin: Any, name: Any) -> str | None:
    """The model field a list column shows: the field itself, or what a method sorts by."""
    model = model_admin.model
    if isinstance(name, str):
        try:
            return str(model._meta.get_field(name).name)
        except FieldDoesNotExist:
            pass
        name = getattr(model_admin, name, None)
    ordering = getattr(name, "admin_order_field", None)
    return ordering if isinstance(ordering, str) and not ordering.startswith("-") else None


def _filter_lookups(model: type[models.Model], path: str) -> set[str]:
    """What Django's field list filter for ``path`` writes in the URL."""
    field = get_fields_from_path(model, path)[-1]
    lookups = {path, f"{path}__exact", f"{path}__isnull"}
    target = getattr(field, "target_field", None) if field.is_relation else None
    if target is not None:  # RelatedFieldListFilter: the related row's key
        lookups.add(f"{path}__{target.name}__exact")
    if isinstance(field, models.DateField):
        lookups |= {f"{path}__gte", f"{path}__lt"}
    return lookups


class GuardedChangeList(ChangeList):
    """A changelist whose URL values cannot crash the page (see the module docstring)."""

    def __init__(self, request: HttpRequest, *args: Any, **kwargs: Any) -> None:
        super().__init__(request, *args, **kwargs)
        if self.date_hierarchy:
            # The drill-down reads the dates themselves (MIN, MAX, truncated to a year): a
            # row stored out of range would fail it. Such a row is still listed (its date
            # shown as unreadable), only left out of the drill-down.
            name = self.date_hierarchy
            vendor = connections[self.queryset.db].vendor
            self.queryset = self.queryset.filter(
                readable_q(name, vendor) | Q(**{f"{name}__isnull": True})
            )

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> Any:
        try:
            queryset = super().get_queryset(request, exclude_parameters)
        except (ValueError, OverflowError) as exc:
            # The date drill-down computes its bounds in Python: year 9999 has no end
            # inside datetime's range, and a 20-digit year overflows at once.
            raise IncorrectLookupParameters(exc) from exc
        if self.filter_params or self.query:
            _probe(queryset)
        return queryset


def _probe(queryset: QuerySet[Any]) -> None:
    """Run the filtered query once, in a savepoint, before the page counts and lists it.

    Whatever a URL value makes the database (or the driver's parameter adaptation) refuse
    becomes an invalid filter. The savepoint keeps the surrounding transaction usable: on
    PostgreSQL a failed statement would otherwise abort it (``ATOMIC_REQUESTS``, tests).
    """
    try:
        with transaction.atomic(using=queryset.db):
            queryset.exists()
    except (DatabaseError, OverflowError, ValueError) as exc:
        raise IncorrectLookupParameters(exc) from exc


class ContentLookupGuardMixin:
    """``ModelAdmin`` mixin: accept from a URL only the lookups the changelist produces
    (never one on content); guard the changelist."""

    model: type[models.Model]
    #: Lookups the admin's own links write into this changelist's URL (see ``url_lookups``).
    url_lookups: tuple[str, ...] = ()

    def lookup_allowed(self, lookup: str, value: Any, request: HttpRequest | None = None) -> bool:
        if touches_content(self.model, lookup) or lookup not in url_lookups(self, request):
            return False
        return bool(super().lookup_allowed(lookup, value, request))  # type: ignore[misc]

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return GuardedChangeList
