"""The datetimes bsft_saga stores: which ones it accepts, and how it reads back the others.

Every datetime bsft_saga writes (a timer's ``due_at``, a deadline, a command's or an admin
form's moment) must be aware and between ``EARLIEST`` and ``LATEST`` in UTC: 0001-01-02
to the end of 9998-12-31. Python's ``datetime`` ends at 9999-12-31 and psycopg reads no
PostgreSQL timestamp after it, so a value near that end, such as
``9999-12-31T23:00-15:00`` (year 10000 in UTC), would be stored by PostgreSQL and then
fail every query that reads it, while SQLite's adapter refuses it with an
``OverflowError``. The day kept at each end lets any stored value be shown in any time zone.
:func:`storable` is the one check every entry point calls.

A row stored before that check existed (or written by hand) may still hold such a value.
:func:`readable_rows` loads a queryset's rows without failing on it: each datetime column
that cannot be read becomes an :class:`Unreadable` text, and :func:`unreadable_fields` names it,
instead of failing the page.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from functools import cache
from typing import Any, ClassVar

from django.db import connections, models
from django.db.models import Case, F, Q, Value, When
from django.db.models.functions import Cast, Substr
from django.db.models.lookups import Exact
from django.db.models.query import ModelIterable, QuerySet

__all__ = [
    "EARLIEST",
    "LATEST",
    "Unreadable",
    "readable_q",
    "readable_rows",
    "storable",
    "unreadable_fields",
]

#: The earliest instant bsft_saga stores (UTC).
EARLIEST = datetime(1, 1, 2, tzinfo=UTC)
#: The latest instant bsft_saga stores (UTC): the last microsecond of 9998-12-31.
LATEST = datetime(9998, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)


def storable(value: Any, *, field: str, where: str) -> datetime:
    """Return ``value`` if bsft_saga can store it as ``field``; else raise ``ValueError``.

    ``value`` must be an aware ``datetime`` between ``EARLIEST`` and ``LATEST`` in UTC
    (anything but a ``datetime`` is a ``TypeError``). The message names ``where`` (the
    call, e.g. ``publish(orders.placed)``) and ``field``, and the accepted range.
    """
    if not isinstance(value, datetime):
        raise TypeError(f"{where}: {field} must be an aware datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{where}: {field} must be an aware datetime, got a naive one")
    try:
        in_range = EARLIEST <= value.astimezone(UTC) <= LATEST
    except OverflowError:  # before year 1 or after year 9999 once in UTC
        in_range = False
    if not in_range:
        raise ValueError(
            f"{where}: {field} {value.isoformat()} is out of range; bsft_saga stores "
            f"datetimes from {EARLIEST.date().isoformat()} to {LATEST.date().isoformat()} (UTC)"
        )
    return value


class Unreadable(str):
    """What :func:`readable_rows` puts in place of a datetime it cannot read: the words
    "unreadable, stored as" and the stored text (cut short).

    A ``str``, so that every page displays it as it is (Django's admin shows a string in a
    datetime column unchanged), also inside a format string (``f"{row.due_at:%Y}"``).
    """

    __slots__ = ()

    @classmethod
    def of(cls, stored: str) -> Unreadable:
        shown = stored if len(stored) <= 40 else stored[:37] + "..."
        return cls(f"unreadable, stored as {shown}")

    def __format__(self, format_spec: str) -> str:
        return str(self)


def readable_q(name: str, vendor: str) -> Q:
    """The rows whose datetime column ``name`` holds a value that can be read back.

    SQLite stores datetimes as text, which compares as text: a value with a five-digit
    year sorts inside the range, so its shape is checked too.
    """
    condition = Q(**{f"{name}__gte": EARLIEST, f"{name}__lte": LATEST})
    if vendor == "sqlite":
        condition &= Q(Exact(Substr(name, 5, 1), Value("-")))
    return condition


def readable_rows(queryset: QuerySet[Any], *, related: tuple[str, ...] = ()) -> QuerySet[Any]:
    """``queryset`` whose rows load even when a datetime column holds an unreadable value.

    Each such column of a loaded row is an :class:`Unreadable` text, listed by
    :func:`unreadable_fields`. On PostgreSQL, whose driver fails on the value itself, the
    column is read through ``CASE``; elsewhere it is read as it is (SQLite gives ``None``
    for a value it cannot parse). ``related`` names foreign keys to load along (as
    ``select_related``) without their datetime columns, which a page showing the related
    row's name does not need. Meant for the pages that show rows to people (admin, API):
    each datetime column costs one more expression in the query.
    """
    model: type[models.Model] = queryset.model
    vendor = connections[queryset.db].vendor
    names = _datetime_fields(model)
    annotations: dict[str, Any] = {}
    for name in names:
        # The stored text of a value that cannot be read; null for any other.
        unreadable = Q(**{f"{name}__isnull": False}) & ~readable_q(name, vendor)
        annotations[_RAW + name] = Case(
            When(unreadable, then=Cast(name, models.TextField())),
            default=None,
            output_field=models.TextField(),
        )
        if vendor == "postgresql":
            annotations[_READ + name] = Case(
                When(readable_q(name, vendor), then=F(name)), default=None
            )
    if vendor == "postgresql":
        queryset = queryset.defer(*names)
    if related:
        queryset = queryset.select_related(*related).defer(
            *(
                f"{relation}__{name}"
                for relation in related
                for name in _datetime_fields(model._meta.get_field(relation).related_model)
            )
        )
    queryset = queryset.annotate(**annotations)
    queryset._iterable_class = _iterable(names, vendor == "postgresql")
    return queryset


def unreadable_fields(row: models.Model) -> tuple[str, ...]:
    """The datetime fields of ``row`` that :func:`readable_rows` could not read."""
    return tuple(getattr(row, _UNREADABLE_ATTRIBUTE, ()))


_RAW = "_bsft_saga_raw_"
_READ = "_bsft_saga_read_"
_UNREADABLE_ATTRIBUTE = "_bsft_saga_unreadable"


@cache
def _datetime_fields(model: type[models.Model]) -> tuple[str, ...]:
    return tuple(
        field.name
        for field in model._meta.concrete_fields
        if isinstance(field, models.DateTimeField)
    )


class _ReadableIterable(ModelIterable):
    """Puts each loaded datetime back in its field, or an ``Unreadable`` in its place."""

    names: ClassVar[tuple[str, ...]] = ()
    read_through_case: ClassVar[bool] = False

    def __iter__(self) -> Iterator[Any]:
        for row in super().__iter__():
            unreadable = []
            for name in self.names:
                raw = row.__dict__.pop(_RAW + name, None)
                value = row.__dict__.pop(_READ + name, None)
                if not self.read_through_case:
                    value = row.__dict__.get(name)
                if raw is not None:
                    unreadable.append(name)
                    value = Unreadable.of(raw)
                row.__dict__[name] = value
            setattr(row, _UNREADABLE_ATTRIBUTE, tuple(unreadable))
            yield row


@cache
def _iterable(names: tuple[str, ...], read_through_case: bool) -> type[_ReadableIterable]:
    attributes = {"names": names, "read_through_case": read_through_case}
    return type("ReadableIterable", (_ReadableIterable,), attributes)
