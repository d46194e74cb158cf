"""Read-only operational admin for saga instances, timers, outbox rows and audit records.

Nothing here edits a row: the engine and the dispatcher own every write. The actions call
services: ``requeue_dead_lettered`` and ``fire_now`` on the timer changelist (both need
``bsft_saga.change_sagatimeout``), ``terminate_sagas`` on the instance changelist (needs
``bsft_saga.terminate_saga``; see :mod:`bsft_saga.admin.operations`).

State, payloads and error messages (which can quote payloads) are shown only to users with
the content permission (``BSFT_SAGA["API"]["READ_CONTENT_PERMISSION"]``, or
``bsft_saga.read_saga_content`` when that is ``None``), and only while an audit recorder is
configured: each page view that shows content (an instance, a timer, an outbox row) is
recorded, like a read through the HTTP API, and with ``AUDIT_RECORDER = None`` no page shows
any. A changelist URL may carry only the lookups the page itself produces, never one on
content (``bsft_saga.admin.queries``). A date stored out of range is shown as unreadable,
not a failed page (``bsft_saga.db.datetimes``). Requeues and fire-now are audited like
terminations (``bsft_saga.audit``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from django.contrib import admin, messages
from django.contrib.admin.utils import flatten_fieldsets
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.functional import Promise
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from bsft_saga import clock, outbox
from bsft_saga.admin.claimers import ClaimerFieldsMixin
from bsft_saga.admin.journal import HISTORY_TEMPLATE, JournalHistoryMixin, timeline
from bsft_saga.admin.operations import (
    CancelAndRescheduleActions,
    FireNowAction,
    TerminateSagasAction,
    message_refusals,
)
from bsft_saga.admin.picture import instance_picture
from bsft_saga.admin.queries import ContentLookupGuardMixin
from bsft_saga.admin.times import MomentFieldsMixin
from bsft_saga.audit import READ_CONTENT, get_audit_recorder, record_action
from bsft_saga.conf import saga_settings
from bsft_saga.db.datetimes import readable_rows, unreadable_fields
from bsft_saga.delivery.requeue import RequeueReport
from bsft_saga.listing import (
    ROWS_LISTED,
    delayed_messages,
    listed_delayed_messages,
    listed_kept_events,
)
from bsft_saga.models import (
    SagaAuditRecord,
    SagaInstance,
    SagaKeptEvent,
    SagaOutboxMessage,
    SagaTimeout,
)
from bsft_saga.querysets import (
    OUTBOX_STATUSES,
    TIMER_STATUSES,
    DeliveryStatus,
    SagaInstanceQuerySet,
    SagaOutboxQuerySet,
    SagaTimeoutQuerySet,
)
from bsft_saga.timeouts import maintenance
from bsft_saga.timeouts.listing import RETIRED_TIMERS_LISTED, listed_timers, may_see_timers

CONTENT_PERMISSION_FALLBACK = "bsft_saga.read_saga_content"


def can_read_content(request: HttpRequest) -> bool:
    """Whether the user may see saga state, payloads and error messages."""
    permission = saga_settings.api.read_content_permission or CONTENT_PERMISSION_FALLBACK
    return bool(request.user.has_perm(permission))


def shows_content(request: HttpRequest) -> bool:
    """Whether pages show content to this request: the user may read it, and the read can
    be audited (with ``AUDIT_RECORDER = None`` nobody sees content in the admin)."""
    return can_read_content(request) and get_audit_recorder() is not None


#: Set on the instance a change page shows: whether its viewer may see timers, and so their
#: names in the flow's picture and the journal (the timer inline needs the same permission).
_TIMER_NAMES_SHOWN = "_bsft_saga_timer_names_shown"


def _timer_names_shown(obj: SagaInstance) -> bool:
    return bool(getattr(obj, _TIMER_NAMES_SHOWN, False))


def _pretty_json(value: Any) -> SafeString:
    return format_html("<pre>{}</pre>", json.dumps(value, indent=2, sort_keys=True))


def _status_label(obj: SagaTimeout | SagaOutboxMessage | SagaKeptEvent) -> str:
    """The row's status; "unknown" when a date it depends on cannot be read."""
    unreadable = unreadable_fields(obj)
    if unreadable:
        return _("unknown: %(fields)s cannot be read") % {"fields": ", ".join(unreadable)}
    return str(obj.status().label)


class NoWritesMixin:
    """No add, change or delete for anyone: rows are written by the engine and dispatcher."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def _every_field_shown(model_admin: Any, request: HttpRequest, obj: Any) -> list[Any]:
    # From the fieldsets, not the names: the moment columns there are the ones to match.
    return flatten_fieldsets(model_admin.get_fieldsets(request, obj))


class ReadOnlyAdmin(MomentFieldsMixin, ContentLookupGuardMixin, NoWritesMixin, admin.ModelAdmin):
    """Viewable with the model's view permission; no add, change or delete for anyone.
    Moments are shown to the second with their time zone (``bsft_saga.admin.times``)."""

    # A filtered page would otherwise also COUNT(*) the whole table, on every load.
    show_full_result_count = False

    class Media:
        css = {"all": ("bsft_saga/admin.css",)}

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return _every_field_shown(self, request, obj)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        # A date stored out of range (by an earlier release, or by hand) would fail the
        # whole page; it is shown as unreadable instead (bsft_saga.db.datetimes).
        related = self.list_select_related
        return readable_rows(
            super().get_queryset(request),
            related=tuple(related) if isinstance(related, list | tuple) else (),
        )

    #: Display fields that show content; a change page lists them only to content readers.
    content_fields: tuple[str, ...] = ()

    def audited_saga(self, obj: Any) -> SagaInstance | None:
        """The saga a change page's content belongs to, named in its audit record; ``None``
        for a row without one (the record then names no saga)."""
        return None

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        response = super().change_view(request, object_id, form_url, extra_context)
        shown = _shown_object(response)
        # Recorded before the (lazy) template renders: a recorder that fails serves nothing.
        if shown is not None and self.content_fields and shows_content(request):
            _audit_content_read(request, self.audited_saga(shown))
        return response

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = list(self.fields or ())
        if shows_content(request):
            fields += list(self.content_fields)
        return fields


def _audit_content_read(request: HttpRequest, saga: SagaInstance | None) -> None:
    record_action(READ_CONTENT, user=request.user, saga=saga)


# -- instances ------------------------------------------------------------------------------


class StalledFilter(admin.SimpleListFilter):
    """Active instances without a transition for a while (``SagaInstance.objects.stalled``)."""

    title = _("stalled")
    parameter_name = "stalled"
    windows = {"1h": timedelta(hours=1), "1d": timedelta(days=1), "7d": timedelta(days=7)}

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [
            ("1h", _("no transition for 1 hour")),
            ("1d", _("no transition for 1 day")),
            ("7d", _("no transition for 7 days")),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any] | None:
        window = self.windows.get(self.value() or "")
        if window is None:
            return queryset
        return self.narrow(cast(SagaInstanceQuerySet, queryset), clock.now() - window)

    def narrow(self, instances: SagaInstanceQuerySet, since: datetime) -> SagaInstanceQuerySet:
        return instances.stalled(since)


class StuckFilter(StalledFilter):
    """Stalled, and without a pending timer (``SagaInstance.objects.stuck``): no timer will
    move them; only an outside event can (or ``terminate_sagas``)."""

    title = _("stuck")
    parameter_name = "stuck"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [
            ("1h", _("no timer, not moved for 1 hour")),
            ("1d", _("no timer, not moved for 1 day")),
            ("7d", _("no timer, not moved for 7 days")),
        ]

    def narrow(self, instances: SagaInstanceQuerySet, since: datetime) -> SagaInstanceQuerySet:
        return instances.stuck(since)


class ReadOnlyInline(MomentFieldsMixin, NoWritesMixin, admin.TabularInline):
    """An inline of the instance page: every field read-only, no rows added or deleted."""

    extra = 0
    max_num = 0
    can_delete = False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return _every_field_shown(self, request, obj)


class SagaTimeoutInline(ReadOnlyInline):
    model = SagaTimeout
    fields = (
        "name",
        "status",
        "due_at",
        "event_type",
        "scope",
        "attempts",
        "next_attempt_at",
        "dispatched_at",
    )
    ordering = ("due_at", "id")
    show_change_link = True

    @admin.display(description=_("status"))
    def status(self, obj: SagaTimeout) -> str:
        return _status_label(obj)


class SagaKeptEventInline(ReadOnlyInline):
    """The events kept for a later step (``keep_early``); their payloads are content: shown
    only to content readers, whose read of the page is audited like the state."""

    model = SagaKeptEvent
    fields = ("event_type", "step_index", "kept_at", "message_id", "correlation_id")
    content_fields = ("payload_json",)
    ordering = ("kept_at", "id")
    verbose_name_plural = _("kept events")

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Part of the instance's page, as its timers are: seen by whoever sees the instance.
        return request.user.has_perm("bsft_saga.view_sagainstance")

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return [*self.fields, *(self.content_fields if shows_content(request) else ())]

    @admin.display(description=_("payload"))
    def payload_json(self, obj: SagaKeptEvent) -> SafeString:
        return _pretty_json(obj.payload)


class SagaDelayedMessageInline(ReadOnlyInline):
    """The delayed messages the instance's steps published that still wait for their
    ``deliver_at``, soonest first: when each is delivered, not what it carries (its
    payload is on its own page, for content readers)."""

    model = SagaOutboxMessage
    fields = ("event_type", "created_at", "deliver_at", "attempts")
    ordering = ("deliver_at", "id")
    show_change_link = True
    verbose_name = _("delayed message")
    verbose_name_plural = _("delayed messages")


@admin.register(SagaInstance)
class SagaInstanceAdmin(JournalHistoryMixin, TerminateSagasAction, ReadOnlyAdmin):
    list_display = ("saga_type", "key", "step_index", "is_complete", "updated_at")
    list_filter = ("saga_type", "flow_version", "is_complete", StalledFilter, StuckFilter)
    search_fields = ("saga_type", "correlation_key")
    date_hierarchy = "updated_at"
    ordering = ("-updated_at",)
    fields = (
        *SagaInstance.PROGRESS_FIELDS,
        "terminated_reason",
        "picture",
        "timeline",
        "timers",
        "kept_summary",
        "delayed_summary",
    )
    content_fields = ("state_json",)
    inlines = (SagaTimeoutInline, SagaKeptEventInline, SagaDelayedMessageInline)
    actions = ("terminate_sagas",)
    object_history_template = HISTORY_TEMPLATE  # the journal (bsft_saga.admin.journal)
    #: The top of the instance's page: where it is, then its flow's picture and its journal;
    #: every other field follows them (``get_fieldsets``).
    headline_fields = (
        "saga_type",
        "correlation_key",
        "step_index",
        "is_complete",
        "updated_at",
        "terminated_reason",
    )

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        [(_title, options)] = super().get_fieldsets(request, obj)
        shown = list(options["fields"])

        def named(*names: str) -> list[Any]:
            return [field for field in shown if str(field) in names]

        top = {*self.headline_fields, "picture", "timeline", *self.content_fields}
        sections = [
            (None, [*named(*self.headline_fields), *named("picture"), *named("timeline")]),
            (_("Details"), [field for field in shown if str(field) not in top]),
            (_("Content"), named(*self.content_fields)),
        ]
        return [(title, {"fields": fields}) for title, fields in sections if fields]

    @admin.display(description=_("correlation key"), ordering="correlation_key")
    def key(self, obj: SagaInstance) -> str:
        return obj.correlation_key or "-"

    @admin.display(description=_("state"))
    def state_json(self, obj: SagaInstance) -> SafeString:
        return _pretty_json(obj.state)

    def audited_saga(self, obj: SagaInstance) -> SagaInstance:
        return obj

    def get_object(self, request: HttpRequest, object_id: str, from_field: Any = None) -> Any:
        obj = super().get_object(request, object_id, from_field)
        if obj is not None:
            # The display fields below get the instance alone: it carries what they may show.
            setattr(obj, _TIMER_NAMES_SHOWN, may_see_timers(request.user))
        return obj

    @admin.display(description=_("flow"))
    def picture(self, obj: SagaInstance) -> SafeString | str:
        """The flow's steps as an inline SVG, marked with where this instance is."""
        return instance_picture(obj, timer_names=_timer_names_shown(obj))

    def get_inlines(self, request: HttpRequest, obj: Any) -> Any:
        # Kept events and delayed messages are rare: their inlines only where there are some.
        if obj is None:
            return (SagaTimeoutInline,)
        shown = _listed_counts(obj)
        return (
            SagaTimeoutInline,
            *((SagaKeptEventInline,) if shown.kept else ()),
            *((SagaDelayedMessageInline,) if shown.delayed else ()),
        )

    def get_formset_kwargs(
        self, request: HttpRequest, obj: Any, inline: Any, prefix: str
    ) -> dict[str, Any]:
        kwargs: dict[str, Any] = super().get_formset_kwargs(request, obj, inline, prefix)
        if isinstance(inline, SagaTimeoutInline) and obj is not None and obj.pk is not None:
            # Capped like the HTTP detail: a recurring timer leaves a row per occurrence.
            kwargs["queryset"] = readable_rows(listed_timers(obj))
        elif isinstance(inline, SagaKeptEventInline) and obj is not None:
            # At most ROWS_LISTED of each, like the HTTP detail (bsft_saga.listing).
            kwargs["queryset"] = readable_rows(listed_kept_events(obj))
        elif isinstance(inline, SagaDelayedMessageInline) and obj is not None:
            kwargs["queryset"] = readable_rows(listed_delayed_messages(obj, clock.now()))
        return kwargs

    @admin.display(description=_("journal"))
    def timeline(self, obj: SagaInstance) -> SafeString:
        """The newest journal entries, as sentences; the *History* page has them all."""
        return timeline(self.admin_site.name, obj, timer_names=_timer_names_shown(obj))

    @admin.display(description=_("timers"))
    def timers(self, obj: SagaInstance) -> SafeString:
        total = obj.timeouts.count()
        return self._saga_rows_link(
            obj,
            "sagatimeout",
            ngettext(
                "%(total)d timer in all; the list below shows every pending one and the "
                "%(retired)d most recently retired.",
                "%(total)d timers in all; the list below shows every pending one and the "
                "%(retired)d most recently retired.",
                total,
            )
            % {"total": total, "retired": RETIRED_TIMERS_LISTED},
            _("All timers of this saga"),
        )

    @admin.display(description=_("kept events"))
    def kept_summary(self, obj: SagaInstance) -> SafeString | str:
        """How many events are kept for the instance, and a link to all of them."""
        total = _listed_counts(obj).kept
        if not total:
            return str(_("None."))
        return self._saga_rows_link(
            obj,
            "sagakeptevent",
            _capped(
                total,
                ngettext(
                    "%(total)d kept event, listed below.",
                    "%(total)d kept events, listed below, oldest first.",
                    total,
                ),
                ngettext(
                    "%(total)d kept event in all; the list below shows the %(listed)d oldest.",
                    "%(total)d kept events in all; the list below shows the %(listed)d oldest.",
                    total,
                ),
            ),
            _("All kept events of this saga"),
        )

    @admin.display(description=_("delayed messages"))
    def delayed_summary(self, obj: SagaInstance) -> SafeString | str:
        """How many delayed messages still wait for their delivery time, and a link to them."""
        total = _listed_counts(obj).delayed
        if not total:
            return str(_("None waiting."))
        return self._saga_rows_link(
            obj,
            "sagaoutboxmessage",
            _capped(
                total,
                ngettext(
                    "%(total)d delayed message waiting for its delivery time, listed below.",
                    "%(total)d delayed messages waiting for their delivery time, listed "
                    "below, soonest first.",
                    total,
                ),
                ngettext(
                    "%(total)d delayed message waiting in all; the list below shows the "
                    "%(listed)d soonest.",
                    "%(total)d delayed messages waiting in all; the list below shows the "
                    "%(listed)d soonest.",
                    total,
                ),
            ),
            _("All delayed messages of this saga"),
            status=DeliveryStatus.WAITING.value,
        )

    def _saga_rows_link(
        self,
        obj: SagaInstance,
        model_name: str,
        summary: str,
        link_text: str | Promise,
        **filters: str,
    ) -> SafeString:
        """``summary``, then a link to the admin's list of ``model_name`` rows of ``obj``
        (narrowed by ``filters``, e.g. ``status=``), which holds those the page leaves out."""
        url = reverse(f"{self.admin_site.name}:bsft_saga_{model_name}_changelist")
        query = urlencode({"saga__id__exact": str(obj.pk), **filters})
        return format_html('{} <a href="{}?{}">{}</a>', summary, url, query, link_text)


@dataclass(frozen=True)
class _ListedCounts:
    kept: int
    delayed: int


#: Where an instance page keeps its counts, so that the inlines and the summaries of one
#: page count each table once.
_COUNTS = "_bsft_saga_listed_counts"


def _listed_counts(obj: SagaInstance) -> _ListedCounts:
    """How many kept events and delayed messages ``obj`` has (two queries per page)."""
    counts: _ListedCounts | None = getattr(obj, _COUNTS, None)
    if counts is None:
        counts = _ListedCounts(
            kept=obj.kept_events.count(),
            delayed=delayed_messages(obj, clock.now()).count(),
        )
        setattr(obj, _COUNTS, counts)
    return counts


def _capped(total: int, all_listed: str, capped: str) -> str:
    """The summary of a list an instance page caps at ``ROWS_LISTED`` rows."""
    if total <= ROWS_LISTED:
        return all_listed % {"total": total}
    return capped % {"total": total, "listed": ROWS_LISTED}


def _shown_object(response: HttpResponse) -> Model | None:
    """The object a successfully rendered change view displayed."""
    if response.status_code != 200:
        return None
    context = getattr(response, "context_data", None) or {}
    original: Model | None = context.get("original")
    return original


# -- timers ---------------------------------------------------------------------------------


class DeliveryStatusFilter(admin.SimpleListFilter):
    """A row's delivery status (``DeliveryStatus``), as the querysets define it."""

    title = _("status")
    parameter_name = "status"
    statuses: tuple[DeliveryStatus, ...] = ()

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [(status.value, status.label) for status in self.statuses]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any] | None:
        value = self.value()
        if value not in {status.value for status in self.statuses}:
            return queryset
        rows = cast(SagaTimeoutQuerySet | SagaOutboxQuerySet, queryset)
        return rows.in_status(DeliveryStatus(value), clock.now())


class TimerStatusFilter(DeliveryStatusFilter):
    """A timer's status, and *due*: every pending timer whose ``due_at`` has passed, the
    ones a claim holds or a retry back-off delays included (``saga_status``'s
    ``timeouts_due``, which the app index links here)."""

    statuses = TIMER_STATUSES
    DUE = "due"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [*super().lookups(request, model_admin), (self.DUE, _("due (late)"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any] | None:
        if self.value() == self.DUE:
            return cast(SagaTimeoutQuerySet, queryset).due(clock.now())
        return super().queryset(request, queryset)


@admin.register(SagaTimeout)
class SagaTimeoutAdmin(
    ClaimerFieldsMixin, FireNowAction, CancelAndRescheduleActions, ReadOnlyAdmin
):
    list_display = ("name", "saga_link", "status", "due_at", "event_type", "attempts")
    list_filter = (TimerStatusFilter, "event_type", "calendar_key", "scope", "saga__saga_type")
    list_select_related = ("saga",)
    search_fields = ("name", "saga__correlation_key", "event_type")
    date_hierarchy = "due_at"
    ordering = ("-due_at", "-id")
    actions = ("requeue_dead_lettered", "fire_now", "cancel_timeouts", "reschedule_timeout")
    url_lookups = ("saga__id__exact",)  # an instance page's "All timers of this saga"
    fields = (
        "id",
        "saga_link",
        "name",
        "status",
        "due_at",
        "event_type",
        "message_id",
        "calendar_key",
        "correlation_id",
        "scope",
        "ignore_deadline",
        "scheduled_step_index",
        "scheduled_at",
        "attempts",
        "next_attempt_at",
        "dispatched_at",
        "outcome",
        "dead_lettered_at",
        "claim_token",
        "claimed_until",
        "claimer",
        "claimer_heartbeat",
    )
    content_fields = ("payload_json", "last_error", "dead_letter_reason")

    @admin.display(description=_("saga"), ordering="saga__saga_type")
    def saga_link(self, obj: SagaTimeout) -> SafeString:
        return link_to_saga(self, obj.saga)

    @admin.display(description=_("status"), ordering="outcome")
    def status(self, obj: SagaTimeout) -> str:
        return _status_label(obj)

    @admin.display(description=_("payload"))
    def payload_json(self, obj: SagaTimeout) -> SafeString:
        return _pretty_json(obj.payload)

    def has_requeue_permission(self, request: HttpRequest) -> bool:
        """The admin edits nothing, so requeueing is gated on the model's change permission."""
        return bool(request.user.has_perm("bsft_saga.change_sagatimeout"))

    @admin.action(
        description=_("Requeue selected dead-lettered timers"),
        permissions=["requeue"],
    )
    def requeue_dead_lettered(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        # The service the command calls, with the operator named in each audit record.
        ids = list(queryset.values_list("pk", flat=True))
        result = maintenance.requeue_dead_lettered(ids, user=request.user)
        requeued = ngettext(
            "%(count)d dead-lettered timer was requeued; it fires at the next drain.",
            "%(count)d dead-lettered timers were requeued; they fire at the next drain.",
            result.requeued,
        )
        report_requeue(self, request, result, noun=("timer", "timers"), requeued=requeued)

    def audited_saga(self, obj: SagaTimeout) -> SagaInstance:
        return obj.saga


def link_to_saga(model_admin: admin.ModelAdmin[Any], saga: SagaInstance | None) -> SafeString:
    """A list cell naming ``saga`` and linking to its page; the empty value for none."""
    if saga is None:
        return format_html("{}", model_admin.get_empty_value_display())
    url = reverse(f"{model_admin.admin_site.name}:bsft_saga_sagainstance_change", args=[saga.pk])
    return format_html('<a href="{}">{}</a>', url, str(saga))


def report_requeue(
    model_admin: admin.ModelAdmin[Any],
    request: HttpRequest,
    result: RequeueReport,
    *,
    noun: tuple[str, str],
    requeued: str,
) -> None:
    """Tell the user how many rows a requeue action requeued and why any were refused.

    ``requeued`` is the success message, already translated for the count (``ngettext``).
    """
    if result.requeued:
        model_admin.message_user(request, requeued % {"count": result.requeued}, messages.SUCCESS)
    count = len(result.refused)
    headline = ngettext(
        "%(count)d %(noun)s was not requeued:",
        "%(count)d %(nouns)s were not requeued:",
        count,
    ) % {"count": count, "noun": noun[0], "nouns": noun[1]}
    message_refusals(model_admin, request, headline, [reason for _pk, reason in result.refused])


# -- outbox and audit -----------------------------------------------------------------------


class OutboxStatusFilter(DeliveryStatusFilter):
    statuses = OUTBOX_STATUSES


@admin.register(SagaOutboxMessage)
class SagaOutboxMessageAdmin(ClaimerFieldsMixin, ReadOnlyAdmin):
    list_display = ("event_type", "saga_link", "status", "created_at", "deliver_at", "attempts")
    list_filter = (OutboxStatusFilter, "event_type")
    list_select_related = ("saga",)
    search_fields = ("event_type", "correlation_id")
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
    fields = (
        "id",
        "event_type",
        "saga",
        "status",
        "correlation_id",
        "causation_id",
        "deadline",
        "created_at",
        "deliver_at",
        "delivered_at",
        "attempts",
        "next_attempt_at",
        "dead_lettered_at",
        "claimed_until",
        "claimer",
        "claimer_heartbeat",
    )
    content_fields = ("payload_json", "last_error")
    actions = ("requeue_dead_lettered",)
    url_lookups = ("saga__id__exact",)  # an instance page's "All delayed messages of this saga"

    @admin.display(description=_("status"))
    def status(self, obj: SagaOutboxMessage) -> str:
        return _status_label(obj)

    @admin.display(description=_("saga"), ordering="saga__saga_type")
    def saga_link(self, obj: SagaOutboxMessage) -> SafeString:
        return link_to_saga(self, obj.saga)

    def has_requeue_permission(self, request: HttpRequest) -> bool:
        """Requeueing is gated on the model's change permission (the admin edits nothing)."""
        return bool(request.user.has_perm("bsft_saga.change_sagaoutboxmessage"))

    @admin.action(
        description=_("Requeue selected dead-lettered outbox messages"),
        permissions=["requeue"],
    )
    def requeue_dead_lettered(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        ids = list(queryset.values_list("pk", flat=True))
        result = outbox.requeue_dead_lettered(ids, user=request.user)
        requeued = ngettext(
            "%(count)d dead-lettered outbox message was requeued; the next drain delivers it.",
            "%(count)d dead-lettered outbox messages were requeued; the next drain delivers them.",
            result.requeued,
        )
        noun = ("outbox message", "outbox messages")
        report_requeue(self, request, result, noun=noun, requeued=requeued)

    @admin.display(description=_("payload"))
    def payload_json(self, obj: SagaOutboxMessage) -> SafeString:
        return _pretty_json(obj.payload)

    def audited_saga(self, obj: SagaOutboxMessage) -> SagaInstance | None:
        return obj.saga


@admin.register(SagaAuditRecord)
class SagaAuditRecordAdmin(ReadOnlyAdmin):
    list_display = ("recorded_at", "action", "username", "saga")
    list_filter = ("action", "saga_type")
    search_fields = ("username", "saga_type", "correlation_key", "correlation_id")
    date_hierarchy = "recorded_at"
    ordering = ("-recorded_at",)
    fields = (
        "recorded_at",
        "action",
        "user",
        "username",
        "saga_type",
        "correlation_key",
        "instance_id",
        "correlation_id",
    )

    @admin.display(description=_("saga"), ordering="saga_type")
    def saga(self, obj: SagaAuditRecord) -> str:
        """The saga type and key in one column, as an instance names itself."""
        if not obj.saga_type:
            return "-"  # an outbox row published with defer=True belongs to no saga
        return f"{obj.saga_type}[{obj.correlation_key or '-'}]"
