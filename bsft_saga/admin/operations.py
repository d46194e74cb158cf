"""The operator's actions of the admin: the ones that change sagas.

- :class:`TerminateSagasAction` (``terminate_sagas``, permission
  ``bsft_saga.terminate_saga``): a confirmation page asks for the reason, then
  :func:`bsft_saga.engine.termination.terminate` completes the selected instances.
- :class:`FireNowAction` (``fire_now``, permission ``bsft_saga.change_sagatimeout``; a
  ``with_deadline`` timer also needs ``bsft_saga.terminate_saga``, since firing it runs
  ``on_expired``): makes the selected pending timers due now
  (:func:`bsft_saga.timeouts.expedite.fire_now`).
- :class:`CancelAndRescheduleActions` (``cancel_timeouts`` and ``reschedule_timeout``, permission
  ``bsft_saga.change_sagatimeout``): cancel the selected pending timers, or move one to a
  new due time typed in a form (:mod:`bsft_saga.timeouts.edits`). A ``with_deadline``
  timer is never canceled, and rescheduling it (which moves the saga's deadline) also
  needs ``bsft_saga.terminate_saga``.

Each action is a mixin for the ``ModelAdmin`` that offers it. The *stuck* filter lives in
:mod:`bsft_saga.admin` next to the *stalled* one; the status summary of the app index page
is the template tag ``saga_status_at_a_glance``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC
from typing import Any, cast

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from bsft_saga.admin.claimers import claimer_of_row, holder_name
from bsft_saga.admin.times import format_moment
from bsft_saga.db.datetimes import EARLIEST, LATEST, storable
from bsft_saga.engine import termination
from bsft_saga.events.codec import unstorable_text
from bsft_saga.timeouts import edits, expedite
from bsft_saga.timeouts.requests import DEADLINE_TIMER_NAME

TERMINATE_PERMISSION = "bsft_saga.terminate_saga"
FIRE_NOW_PERMISSION = "bsft_saga.change_sagatimeout"

# Refusal messages shown one by one; the rest are summarised, so selecting a full page of
# rows that cannot be changed does not flood the screen.
MAX_REFUSALS_LISTED = 10


def message_refusals(
    modeladmin: admin.ModelAdmin[Any], request: HttpRequest, headline: str, reasons: Sequence[str]
) -> None:
    """Warn with ``headline``, then each reason, listing at most ``MAX_REFUSALS_LISTED``."""
    if not reasons:
        return
    modeladmin.message_user(request, headline, messages.WARNING)
    for reason in reasons[:MAX_REFUSALS_LISTED]:
        modeladmin.message_user(request, reason, messages.WARNING)
    if len(reasons) > MAX_REFUSALS_LISTED:
        more = len(reasons) - MAX_REFUSALS_LISTED
        modeladmin.message_user(
            request,
            ngettext("... and %(count)d more.", "... and %(count)d more.", more) % {"count": more},
            messages.WARNING,
        )


class TerminateSagasAction:
    """Adds the action ``terminate_sagas`` to the instance admin."""

    terminate_confirmation_template = (
        "admin/bsft_saga/sagainstance/terminate_selected_confirmation.html"
    )

    def has_terminate_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm(TERMINATE_PERMISSION))

    @admin.action(description=_("Terminate selected sagas"), permissions=["terminate"])
    def terminate_sagas(self, request: HttpRequest, queryset: QuerySet[Any]) -> Any:
        modeladmin = cast("admin.ModelAdmin[Any]", self)
        error = None
        if request.POST.get("post") == "yes":
            reason = request.POST.get("reason", "").strip()
            error = _reason_error(reason)
            if error is None:
                ids = list(queryset.values_list("pk", flat=True))
                result = termination.terminate(ids, reason=reason, user=request.user)
                _report_termination(modeladmin, request, result)
                return None
        opts = modeladmin.model._meta
        context = {
            **modeladmin.admin_site.each_context(request),
            "title": _("Terminate sagas"),
            "opts": opts,
            "queryset": queryset.order_by("saga_type", "correlation_key"),
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "reason": request.POST.get("reason", ""),
            "reason_error": error,
            "media": modeladmin.media,
        }
        return TemplateResponse(request, self.terminate_confirmation_template, context)


def _reason_error(reason: str) -> Any:
    """What is wrong with a termination reason typed in the form; ``None``: nothing."""
    if not reason:
        return _("Say why: the reason is stored on each instance and in the audit record.")
    if unstorable_text(reason) is not None:
        # PostgreSQL refuses a NUL in text (SQLite would store it): a form error, not a 500.
        return _("The reason cannot be stored: remove the NUL characters from it.")
    return None


def _report_termination(
    modeladmin: admin.ModelAdmin[Any],
    request: HttpRequest,
    result: termination.TerminationReport,
) -> None:
    count = len(result.terminated)
    if count:
        modeladmin.message_user(
            request,
            ngettext(
                "%(count)d saga was terminated; its pending timers were canceled.",
                "%(count)d sagas were terminated; their pending timers were canceled.",
                count,
            )
            % {"count": count},
            messages.SUCCESS,
        )
    refused = len(result.refused)
    message_refusals(
        modeladmin,
        request,
        ngettext(
            "%(count)d saga was not terminated:", "%(count)d sagas were not terminated:", refused
        )
        % {"count": refused},
        [reason for _pk, reason in result.refused],
    )


class FireNowAction:
    """Adds the action ``fire_now`` to the timer admin."""

    def has_fire_permission(self, request: HttpRequest) -> bool:
        """Like requeueing, gated on the model's change permission (the admin edits nothing)."""
        return bool(request.user.has_perm(FIRE_NOW_PERMISSION))

    @admin.action(description=_("Fire selected pending timers now"), permissions=["fire"])
    def fire_now(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        modeladmin = cast("admin.ModelAdmin[Any]", self)
        result = expedite.fire_now(list(queryset.values_list("pk", flat=True)), user=request.user)
        if result.due_now:
            modeladmin.message_user(
                request,
                ngettext(
                    "%(count)d timer is due now; it fires at the next drain.",
                    "%(count)d timers are due now; they fire at the next drain.",
                    result.due_now,
                )
                % {"count": result.due_now},
                messages.SUCCESS,
            )
        held = len(result.held)
        message_refusals(
            modeladmin,
            request,
            ngettext(
                "%(count)d timer was made due but is held by a dispatcher's claim:",
                "%(count)d timers were made due but are held by a dispatcher's claim:",
                held,
            )
            % {"count": held},
            [message for _pk, message in result.held],
        )
        refused = len(result.refused)
        message_refusals(
            modeladmin,
            request,
            ngettext("%(count)d timer was not moved:", "%(count)d timers were not moved:", refused)
            % {"count": refused},
            [reason for _pk, reason in result.refused],
        )


class CancelAndRescheduleActions:
    """Adds the actions ``cancel_timeouts`` and ``reschedule_timeout`` to the timer admin."""

    reschedule_template = "admin/bsft_saga/sagatimeout/reschedule_selected.html"

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        """Like firing now, gated on the model's change permission (the admin edits nothing)."""
        return bool(request.user.has_perm(FIRE_NOW_PERMISSION))

    has_reschedule_permission = has_cancel_permission

    @admin.action(description=_("Cancel selected pending timers"), permissions=["cancel"])
    def cancel_timeouts(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        modeladmin = cast("admin.ModelAdmin[Any]", self)
        report = edits.cancel_timers(list(queryset.values_list("pk", flat=True)), user=request.user)
        if report.canceled:
            modeladmin.message_user(
                request,
                ngettext(
                    "%(count)d timer was canceled; it will not fire.",
                    "%(count)d timers were canceled; they will not fire.",
                    len(report.canceled),
                )
                % {"count": len(report.canceled)},
                messages.SUCCESS,
            )
        refused = len(report.refused)
        message_refusals(
            modeladmin,
            request,
            ngettext(
                "%(count)d timer was not canceled:", "%(count)d timers were not canceled:", refused
            )
            % {"count": refused},
            [reason for _pk, reason in report.refused],
        )

    @admin.action(description=_("Reschedule the selected timer"), permissions=["reschedule"])
    def reschedule_timeout(self, request: HttpRequest, queryset: QuerySet[Any]) -> Any:
        modeladmin = cast("admin.ModelAdmin[Any]", self)
        timers = list(queryset[:2])
        if len(timers) != 1:
            modeladmin.message_user(
                request, _("Select exactly one timer to reschedule."), messages.WARNING
            )
            return None
        [timer] = timers
        typed = request.POST.get("due_at", "").strip()
        error = None
        if request.POST.get("post") == "yes":
            due_at, error = _due_time(typed)
            if due_at is not None:
                report = edits.reschedule_timer(timer.pk, due_at, user=request.user)
                if report.refused is not None:
                    message_refusals(
                        modeladmin,
                        request,
                        str(_("The timer was not rescheduled:")),
                        [report.refused],
                    )
                else:
                    done = (
                        _("Timer %(name)r is due at %(due)s; the saga's deadline moved with it.")
                        if report.deadline_moved
                        else _("Timer %(name)r is due at %(due)s.")
                    )
                    modeladmin.message_user(
                        request,
                        done % {"name": timer.name, "due": format_moment(due_at)},
                        messages.SUCCESS,
                    )
                return None
        claimer = claimer_of_row(timer)
        context = {
            **modeladmin.admin_site.each_context(request),
            "title": _("Reschedule a timer"),
            "opts": modeladmin.model._meta,
            "timer": timer,
            "saga_url": reverse(
                f"{modeladmin.admin_site.name}:bsft_saga_sagainstance_change", args=[timer.saga_id]
            ),
            "retired_as": None if timer.is_pending else timer.get_outcome_display(),
            "claimed_until": claimer.lease_ends if claimer.claimed else None,
            "claimer": holder_name(claimer),
            "is_deadline": timer.name == DEADLINE_TIMER_NAME,
            "may_move_deadline": expedite.may_move_deadline(request.user),
            "deadline_permission": expedite.DEADLINE_PERMISSION,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "due_at": typed,
            "due_at_error": error,
            "time_zone": timezone.get_current_timezone_name(),
            "media": modeladmin.media,
        }
        return TemplateResponse(request, self.reschedule_template, context)


def _due_time(typed: str) -> tuple[Any, Any]:
    """The due time typed in the form (ISO 8601; naive: the current time zone), in UTC,
    or ``(None, error)``."""
    try:
        parsed = parse_datetime(typed)
    except ValueError:  # well formed, but no such date
        parsed = None
    if parsed is None:
        return None, _("Type a date and time such as 2026-04-07 09:00 or 2026-04-07T09:00+02:00.")
    if timezone.is_naive(parsed):
        parsed = timezone.make_aware(parsed)
    try:
        return storable(parsed, field="due_at", where="reschedule").astimezone(UTC), None
    except ValueError:
        return None, _(
            "“%(typed)s” is out of range: a due time must lie between %(earliest)s and "
            "%(latest)s (UTC)."
        ) % {
            "typed": typed,
            "earliest": EARLIEST.date().isoformat(),
            "latest": LATEST.date().isoformat(),
        }
