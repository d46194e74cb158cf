"""An instance's journal in the admin: the timeline on its page and its *History* page.

Each ``SagaJournalEntry`` reads as one sentence: when (to the second, with the time zone),
what happened, to which event or timer, through what (published, a timer, the outbox, a
kept event, an operator), the step before and after and the version; then the correlation
and message ids. The journal is metadata, never state or payload, so whoever may view the
instance sees it; the names of its timers, whoever may see timers (``may_see_timers``).

- :func:`timeline`: the instance page's newest ``JOURNAL_ENTRIES_LISTED`` entries, with
  how many there are in all and a link to the rest (an instance woken by a recurring timer
  gathers entries without bound, like its timers);
- :class:`JournalHistoryMixin`: the admin's *History* button shows the whole journal,
  ``JOURNAL_PAGE_SIZE`` entries a page, instead of Django's change log (which this
  read-only admin never writes).
"""

from __future__ import annotations

from typing import Any

from django.contrib.admin.utils import unquote
from django.contrib.admin.views.main import PAGE_VAR
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.text import capfirst
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from bsft_saga.admin.times import moment_html
from bsft_saga.history import newest_first
from bsft_saga.models import JournalKind, JournalVia, SagaInstance, SagaJournalEntry
from bsft_saga.timeouts.listing import may_see_timers

__all__ = [
    "JOURNAL_ENTRIES_LISTED",
    "JOURNAL_PAGE_SIZE",
    "JournalHistoryMixin",
    "describe",
    "timeline",
]

#: The most entries an instance page lists; the *History* page pages through the rest.
JOURNAL_ENTRIES_LISTED = 20
#: Entries per *History* page (Django's own history pages 100 too).
JOURNAL_PAGE_SIZE = 100

ENTRIES_TEMPLATE = "admin/bsft_saga/sagainstance/journal_entries.html"
HISTORY_TEMPLATE = "admin/bsft_saga/sagainstance/object_history.html"


def describe(entry: SagaJournalEntry, *, timer_names: bool = True) -> SafeString:
    """One entry as a sentence, e.g. *Advanced on orders.paid (timer “reminder”): step 1 →
    2, version 3.*, without its moment (shown beside it) or ids (shown after it).

    ``timer_names=False`` (a viewer who may not see timers): *(a timer)*, and an operator's
    action on a timer without the timer's name."""
    kind = capfirst(JournalKind(entry.kind).label) if entry.kind in JournalKind else entry.kind
    name = entry.timer_name if timer_names else ""
    return format_html(
        "<strong>{}</strong>{}{}{}.",
        kind,
        _subject(entry, name),
        _via(entry, name),
        _progress(entry),
    )


def _subject(entry: SagaJournalEntry, timer_name: str) -> SafeString:
    # An operator acts on a timer by name; a transition is the event that caused it.
    if entry.via == JournalVia.OPERATOR and timer_name:
        return format_html(" “{}”", timer_name)
    if entry.event_type:
        return format_html(" {} <code>{}</code>", _("on"), entry.event_type)
    return SafeString()


def _via(entry: SagaJournalEntry, timer_name: str) -> SafeString:
    if entry.via == JournalVia.OPERATOR:
        if entry.user:
            return format_html(" {} <em>{}</em>", _("by operator"), entry.user)
        return format_html(" {}", _("by a command or code"))
    if entry.via == JournalVia.TIMER:
        if timer_name:
            return format_html(" ({} “{}”)", _("timer"), timer_name)
        return format_html(" ({})", _("a timer"))
    words = {
        JournalVia.PUBLISH: _("published"),
        JournalVia.OUTBOX: _("from the outbox"),
        JournalVia.KEPT: _("a kept event"),
    }
    return format_html(" ({})", words.get(entry.via, entry.via))  # type: ignore[call-overload]


def _progress(entry: SagaJournalEntry) -> SafeString:
    before, after = entry.step_before, entry.step_after
    parts = []
    if before is None and after is not None:
        # A start enters its first step from none: "→ step 1", as saga_history's "-> 1".
        parts.append(_("→ step %(after)d") % {"after": after})
    elif before is not None and after is not None and before != after:
        parts.append(_("step %(before)d → %(after)d") % {"before": before, "after": after})
    elif after is not None or before is not None:
        parts.append(_("at step %(step)d") % {"step": after if after is not None else before})
    if entry.version is not None:
        parts.append(_("version %(version)d") % {"version": entry.version})
    if not parts:
        return SafeString()
    return format_html(": {}", ", ".join(parts))


def _ids(entry: SagaJournalEntry) -> SafeString:
    ids = []
    if entry.correlation_id:
        ids.append((_("correlation id"), entry.correlation_id))
    if entry.message_id is not None:
        ids.append((_("message id"), str(entry.message_id)))
    return format_html_join(" · ", "{} <code>{}</code>", ids)


def entry_lines(entries: Any, *, timer_names: bool) -> list[dict[str, SafeString]]:
    """What the entries template shows of each entry: its moment, sentence and ids."""
    return [
        {
            "at": moment_html(entry.at),
            "sentence": describe(entry, timer_names=timer_names),
            "ids": _ids(entry),
        }
        for entry in entries
    ]


def timeline(admin_site_name: str, instance: SagaInstance, *, timer_names: bool) -> SafeString:
    """The instance page's journal: how many entries there are, a link to the *History*
    page, and the newest ``JOURNAL_ENTRIES_LISTED`` of them. One query, two when the
    list is full (the count). ``timer_names``: whether the viewer may see timers."""
    entries = list(newest_first(instance.journal.all())[:JOURNAL_ENTRIES_LISTED])
    total = len(entries) if len(entries) < JOURNAL_ENTRIES_LISTED else instance.journal.count()
    url = reverse(f"{admin_site_name}:bsft_saga_sagainstance_history", args=[instance.pk])
    if total > len(entries):
        summary = ngettext(
            "%(total)d entry in all; the newest %(listed)d, newest first:",
            "%(total)d entries in all; the newest %(listed)d, newest first:",
            total,
        ) % {"total": total, "listed": len(entries)}
    else:
        summary = ngettext("%(total)d entry:", "%(total)d entries, newest first:", total) % {
            "total": total
        }
    return render_to_string(
        ENTRIES_TEMPLATE,
        {
            "summary": summary,
            "history_url": url,
            "lines": entry_lines(entries, timer_names=timer_names),
        },
    )


class JournalHistoryMixin:
    """Adds the journal as the *History* page of the instance admin (its template:
    ``object_history_template``, by default ``HISTORY_TEMPLATE``)."""

    def history_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The instance's whole journal, newest first, paged; for anyone who may view it."""
        model_admin: Any = self
        opts = model_admin.model._meta
        instance = model_admin.get_object(request, unquote(object_id))
        if instance is None:
            return model_admin._get_obj_does_not_exist_redirect(request, opts, object_id)
        if not model_admin.has_view_or_change_permission(request, instance):
            raise PermissionDenied
        paginator = model_admin.get_paginator(
            request, newest_first(instance.journal.all()), JOURNAL_PAGE_SIZE
        )
        page = paginator.get_page(request.GET.get(PAGE_VAR, 1))
        context = {
            **model_admin.admin_site.each_context(request),
            "title": _("Journal of %(saga)s") % {"saga": instance},
            "subtitle": None,
            "page": page,
            "lines": entry_lines(page, timer_names=may_see_timers(request.user)),
            "page_range": paginator.get_elided_page_range(page.number),
            "page_var": PAGE_VAR,
            "pagination_required": paginator.num_pages > 1,
            "module_name": str(capfirst(opts.verbose_name_plural)),
            "object": instance,
            "opts": opts,
            "preserved_filters": model_admin.get_preserved_filters(request),
            "media": model_admin.media,
            **(extra_context or {}),
        }
        request.current_app = model_admin.admin_site.name
        template = model_admin.object_history_template or HISTORY_TEMPLATE
        return TemplateResponse(request, template, context)
