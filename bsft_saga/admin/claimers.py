"""The claimer on a timer's or an outbox row's change page: which process claimed the row,
and whether that process still reports in (:func:`bsft_saga.dispatchers.claimer_of`).

A claimed row whose claimer's heartbeat is stale is held by a process that died or stalls;
the page says so, in the admin's error colour, next to when the lease ends (``claimed
until``): the next pass claims the row again from then on.
"""

from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from bsft_saga.dispatchers import Claimer, claimer_of
from bsft_saga.models import DeliveryRow

__all__ = ["ClaimerFieldsMixin"]

_CACHE = "_bsft_saga_claimer"


def _claimer(row: DeliveryRow) -> Claimer:
    """``claimer_of(row)``, once per row and page (both fields read it)."""
    claimer = getattr(row, _CACHE, None)
    if claimer is None:
        claimer = claimer_of(row)
        setattr(row, _CACHE, claimer)
    return claimer


class ClaimerFieldsMixin:
    """``claimer`` and ``claimer_heartbeat``: read-only fields for a ``ModelAdmin`` of timers
    or outbox rows (name them in its ``fields``)."""

    @admin.display(description=gettext_lazy("claimed by"))
    def claimer(self, obj: DeliveryRow) -> str:
        """The dispatcher whose pass claimed the row last: its kind, host and pid."""
        claimer = _claimer(obj)
        if claimer.dispatcher_id is None:
            return "-"
        dispatcher = claimer.dispatcher
        if dispatcher is None:
            return _("dispatcher %(id)s, which no longer reports (it stopped, or was pruned)") % {
                "id": claimer.dispatcher_id
            }
        return f"{dispatcher.kind} {dispatcher.host}:{dispatcher.pid}"

    @admin.display(description=gettext_lazy("claimer's heartbeat"))
    def claimer_heartbeat(self, obj: DeliveryRow) -> SafeString | str:
        """How long ago the claimer last passed; stale (in the error colour) past
        ``STALE_AFTER``, with what happens to a row it still holds."""
        claimer = _claimer(obj)
        if claimer.idle_seconds is None:
            return "-"
        seconds = f"{claimer.idle_seconds:.0f}"
        if not claimer.stale:
            return _("last pass %(seconds)s s ago") % {"seconds": seconds}
        text = _("stale: last pass %(seconds)s s ago") % {"seconds": seconds}
        if claimer.claimed:
            text += "; " + _("the next pass claims the row again once its lease ends")
        return format_html(
            '<strong class="saga-warning" style="color: var(--error-fg)">{}</strong>', text
        )
