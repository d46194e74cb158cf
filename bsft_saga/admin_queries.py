"""What a changelist URL may ask of the database: no lookups into content, no 500s.

Two guards for the operational admin (``bsft_saga.admin``), both mixed into its base class:

- **Content lookups are refused.** Django's admin lets a URL filter on any local field
  (``?state__total=1234.56``, ``?last_error__startswith=V``). On a content field that is an
  oracle: whoever may see the list can test values inside state, payloads and error
  messages without ever opening a page that the audit records, and extract them a character
  at a time. ``lookup_allowed`` refuses every lookup on or through a content field, for
  every user, superusers included; Django answers ``DisallowedModelAdminLookup`` with 400.
- **Hostile values are an invalid filter, not a crash.** A date the database cannot hold
  (``9999-12-31T23:59:59-23:59`` is in year 10000 in UTC), a year of twenty digits, or a
  NUL byte (which PostgreSQL refuses in text, while SQLite takes it) would fail inside the
  query and answer 500. ``GuardedChangeList`` turns those failures into
  ``IncorrectLookupParameters``, which the admin answers with its usual redirect to
  ``?e=1``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import FieldDoesNotExist
from django.db import DatabaseError, models, transaction
from django.db.models.constants import LOOKUP_SEP
from django.http import HttpRequest

from bsft_saga.models import SagaInstance, SagaOutboxMessage, SagaTimeout

if TYPE_CHECKING:
    from django.db.models import QuerySet

__all__ = ["CONTENT_FIELDS", "ContentLookupGuardMixin", "GuardedChangeList", "touches_content"]

#: The columns that hold saga content: state, payloads, and error messages (which quote
#: payloads). Shown only to content readers, audited, and never filterable from a URL.
CONTENT_FIELDS: dict[type[models.Model], frozenset[str]] = {
    SagaInstance: frozenset({"state"}),
    SagaTimeout: frozenset({"payload", "last_error", "dead_letter_reason"}),
    SagaOutboxMessage: frozenset({"payload", "last_error"}),
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


class GuardedChangeList(ChangeList):
    """A changelist whose URL values cannot crash the page (see the module docstring)."""

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
    """``ModelAdmin`` mixin: refuse URL lookups on content fields; guard the changelist."""

    model: type[models.Model]

    def lookup_allowed(self, lookup: str, value: Any, request: HttpRequest | None = None) -> bool:
        if touches_content(self.model, lookup):
            return False
        return bool(super().lookup_allowed(lookup, value, request))  # type: ignore[misc]

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return GuardedChangeList
