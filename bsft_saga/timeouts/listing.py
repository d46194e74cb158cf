"""Which of an instance's timers a page shows, and in which order.

A saga with a recurring timer keeps a retired row per occurrence, so "every timer of the
instance" grows without bound (30,000 rows made an 11 MB HTTP response). Pages that show an
instance — the HTTP detail and the admin's instance page — list every *pending* timer (the
ones that still matter) and at most ``RETIRED_TIMERS_LISTED`` of the newest *retired*
ones, and say how many there are in all; the full history is paged elsewhere
(``GET instances/<id>/timeouts/``, the admin's timer list filtered by saga).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db.models import F, Q

if TYPE_CHECKING:
    from bsft_saga.models import SagaInstance
    from bsft_saga.querysets import SagaTimeoutQuerySet

__all__ = [
    "LISTING_ORDER",
    "RETIRED_TIMERS_LISTED",
    "TIMER_PERMISSIONS",
    "in_listing_order",
    "listed_timers",
    "may_see_timers",
]

#: Either lets a user see timers (the admin's timer list: Django's view permission, or the
#: change permission, which implies it); their names too where another page mentions them.
TIMER_PERMISSIONS = ("bsft_saga.view_sagatimeout", "bsft_saga.change_sagatimeout")

#: The most retired timers an instance page lists next to the pending ones.
RETIRED_TIMERS_LISTED = 50

#: Pending timers first (``dispatched_at`` is null), soonest due first; then retired ones,
#: most recently retired first.
LISTING_ORDER = (F("dispatched_at").desc(nulls_first=True), "due_at", "id")


def in_listing_order(timeouts: SagaTimeoutQuerySet) -> SagaTimeoutQuerySet:
    """``timeouts`` ordered by ``LISTING_ORDER`` (what a full listing pages through)."""
    return timeouts.order_by(*LISTING_ORDER)


def listed_timers(saga: SagaInstance) -> SagaTimeoutQuerySet:
    """Every pending timer of ``saga`` and its ``RETIRED_TIMERS_LISTED`` newest retired
    ones, in ``LISTING_ORDER``.

    Two queries: the newest retired ids first (a plain list, so the result stays a
    filterable, unsliced queryset that admin inline formsets accept), then the rows.
    """
    from bsft_saga.models import SagaTimeout

    timeouts = SagaTimeout.objects.filter(saga=saga)
    newest_retired = list(
        in_listing_order(timeouts.filter(dispatched_at__isnull=False)).values_list("pk", flat=True)[
            :RETIRED_TIMERS_LISTED
        ]
    )
    listed = Q(dispatched_at__isnull=True) | Q(pk__in=newest_retired)
    return in_listing_order(timeouts.filter(listed))


def may_see_timers(user: Any) -> bool:
    """Whether ``user`` may see timers, and so their names: as on the admin's timer list.

    The flow picture, the admin journal and ``GET instances/<id>/history/`` are shown to
    whoever may view the instance; a timer's name (which may say what the saga is about:
    ``"remind-unpaid-invoice"``) only to this user. The others see where and when a timer
    is, not what it is called.
    """
    return any(user.has_perm(permission) for permission in TIMER_PERMISSIONS)
