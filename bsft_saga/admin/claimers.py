"""The claimer on a timer's or an outbox row's change page: which process holds the row, until
when, and whether that process still reports in (:func:`bsft_saga.dispatchers.claimer_of`).

Only a row that a claim holds now (pending, its lease not over) has a holder: *claimed by*
names the dispatcher and when the lease ends, and *claimer's heartbeat* says how long ago it
last passed, in the admin's error colour once that is stale (the process died or hangs;
the next pass claims the row again when the lease ends). A fired, canceled or delivered
row, or a pending one whose lease has run out, is held by nobody: its page names the
dispatcher that claimed it last, plainly, and shows no heartbeat, since that process's
health says nothing about the row any more.
"""

from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from bsft_saga.admin.times import format_duration, moment_html
from bsft_saga.dispatchers import Claimer, claimer_of
from bsft_saga.models import DeliveryRow

__all__ = ["ClaimerFieldsMixin", "claimer_of_row", "holder_name"]

_CACHE = "_bsft_saga_claimer"


def claimer_of_row(row: DeliveryRow) -> Claimer:
    """``claimer_of(row)``, once per row and page (both fields, and the reschedule form,
    read it)."""
    claimer = getattr(row, _CACHE, None)
    if claimer is None:
        claimer = claimer_of(row)
        setattr(row, _CACHE, claimer)
    return claimer


def holder_name(claimer: Claimer) -> str:
    """The process of ``claimer``: its kind, host and pid; what is known when it has no
    heartbeat row (it does not report, or stopped, or was pruned)."""
    if claimer.dispatcher_id is None:
        return _("a process that does not report (code calling a drain)")
    dispatcher = claimer.dispatcher
    if dispatcher is None:
        return _("dispatcher %(id)s, which no longer reports (it stopped, or was pruned)") % {
            "id": claimer.dispatcher_id
        }
    return f"{dispatcher.kind} {dispatcher.host}:{dispatcher.pid}"


class ClaimerFieldsMixin:
    """``claimer`` and ``claimer_heartbeat``: read-only fields for a ``ModelAdmin`` of timers
    or outbox rows (name them in its ``fields``)."""

    @admin.display(description=gettext_lazy("claimed by"))
    def claimer(self, obj: DeliveryRow) -> SafeString | str:
        """Who holds the row and until when; for a row no claim holds, who claimed it last."""
        claimer = claimer_of_row(obj)
        if claimer.claimed:
            return format_html(
                _("{claimer} until {until}"),
                claimer=holder_name(claimer),
                until=moment_html(claimer.lease_ends),
            )
        if claimer.dispatcher_id is None:
            return "-"
        return _("nobody now; last claimed by %(claimer)s") % {"claimer": holder_name(claimer)}

    @admin.display(description=gettext_lazy("claimer's heartbeat"))
    def claimer_heartbeat(self, obj: DeliveryRow) -> SafeString | str:
        """How long ago the holder of a claimed row last passed; stale (in the error colour)
        past ``STALE_AFTER``, with when the next pass may claim the row again."""
        claimer = claimer_of_row(obj)
        if not claimer.claimed or claimer.stale is None:
            return "-"
        if claimer.ahead_seconds is not None:
            last_pass = _("last pass %(ahead)s ahead of this server's clock") % {
                "ahead": format_duration(claimer.ahead_seconds)
            }
        elif claimer.idle_seconds is None:  # stored out of range: no sign of life
            last_pass = _("last pass unreadable")
        else:
            last_pass = _("last pass %(idle)s ago") % {
                "idle": format_duration(claimer.idle_seconds)
            }
        if not claimer.stale:
            return last_pass
        return format_html(
            '<strong class="saga-warning" style="color: var(--error-fg)">{}</strong>',
            format_html(
                _(
                    "stale: {last_pass}; the next pass claims the row again once its lease "
                    "ends at {until}"
                ),
                last_pass=last_pass,
                until=moment_html(claimer.lease_ends),
            ),
        )
