"""Which of an instance's kept events and delayed messages a page shows, and in which order.

Neither has a bound a page can rely on: a saga may hold up to
``ENGINE["MAX_KEPT_EVENTS_PER_SAGA"]`` kept events, and a step may publish any number of
delayed messages (5,000 kept rows made the admin's instance page 8.8 MB and 15 s). Pages
that show an instance — the HTTP detail and the admin's instance page — list at most
``ROWS_LISTED`` of each and say how many there are in all; the whole list is paged
elsewhere (``GET instances/<id>/kept-events/`` and ``GET instances/<id>/delayed-messages/``,
the admin's kept event and outbox lists filtered by saga). Timers have their own rule
(:mod:`bsft_saga.timeouts.listing`).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bsft_saga.models import SagaInstance
    from bsft_saga.querysets import SagaKeptEventQuerySet, SagaOutboxQuerySet

__all__ = [
    "DELAYED_ORDER",
    "KEPT_ORDER",
    "ROWS_LISTED",
    "delayed_messages",
    "kept_events",
    "listed_delayed_messages",
    "listed_kept_events",
]

#: The most kept events, and the most delayed messages, an instance page lists.
ROWS_LISTED = 50

#: Kept events oldest first: the order their step applies them in.
KEPT_ORDER = ("kept_at", "id")
#: Delayed messages soonest first: the order they are delivered in.
DELAYED_ORDER = ("deliver_at", "id")


def kept_events(saga: SagaInstance) -> SagaKeptEventQuerySet:
    """Every event kept for ``saga``, dead-lettered ones included, in ``KEPT_ORDER``."""
    from bsft_saga.models import SagaKeptEvent

    return SagaKeptEvent.objects.filter(saga=saga).order_by(*KEPT_ORDER)


def delayed_messages(saga: SagaInstance, now: datetime) -> SagaOutboxQuerySet:
    """The delayed messages ``saga``'s steps published that still wait for their
    ``deliver_at`` at ``now``, in ``DELAYED_ORDER``."""
    from bsft_saga.models import SagaOutboxMessage

    return SagaOutboxMessage.objects.filter(saga=saga).waiting(now).order_by(*DELAYED_ORDER)


def listed_kept_events(saga: SagaInstance) -> SagaKeptEventQuerySet:
    """The ``ROWS_LISTED`` oldest of :func:`kept_events`.

    Two queries, as for timers: the ids first (a plain list, so the result stays a
    filterable, unsliced queryset that admin inline formsets accept), then the rows.
    """
    ids = list(kept_events(saga).values_list("pk", flat=True)[:ROWS_LISTED])
    return kept_events(saga).filter(pk__in=ids)


def listed_delayed_messages(saga: SagaInstance, now: datetime) -> SagaOutboxQuerySet:
    """The ``ROWS_LISTED`` soonest of :func:`delayed_messages` (two queries, unsliced)."""
    ids = list(delayed_messages(saga, now).values_list("pk", flat=True)[:ROWS_LISTED])
    return delayed_messages(saga, now).filter(pk__in=ids)
