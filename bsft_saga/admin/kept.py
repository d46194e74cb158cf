"""The kept events' changelist: read-only, operational, with the requeue of dead letters.

Every kept event (``keep_early``), of every saga, and those kept for a key whose saga has
not started yet: where each is (waiting for its step, ready, retrying, claimed,
dead-lettered), its attempts and its saga. ``?saga__id__exact=<uuid>`` lists one saga's (the
instance page links there). Payloads and errors are content: shown on a row's page only to
content readers, and that read is audited. ``requeue_kept_events`` needs
``bsft_saga.change_sagakeptevent``.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from bsft_saga import kept
from bsft_saga.admin.claimers import ClaimerFieldsMixin
from bsft_saga.admin.sagas import (
    DeliveryStatusFilter,
    ReadOnlyAdmin,
    _pretty_json,
    _status_label,
    link_to_saga,
    report_requeue,
)
from bsft_saga.models import SagaInstance, SagaKeptEvent
from bsft_saga.querysets import KEPT_STATUSES


class KeptStatusFilter(DeliveryStatusFilter):
    statuses = KEPT_STATUSES


@admin.register(SagaKeptEvent)
class SagaKeptEventAdmin(ClaimerFieldsMixin, ReadOnlyAdmin):
    list_display = (
        "event_type",
        "saga_link",
        "key",
        "step_index",
        "status",
        "kept_at",
        "attempts",
    )
    list_filter = (KeptStatusFilter, "saga_type", "event_type")
    list_select_related = ("saga",)
    search_fields = ("event_type", "correlation_key", "correlation_id")
    date_hierarchy = "kept_at"
    ordering = ("kept_at", "id")
    #: The instance page links to its kept events here.
    url_lookups = ("saga__id__exact",)
    fields = (
        "id",
        "event_type",
        "saga",
        "saga_type",
        "correlation_key",
        "step_index",
        "status",
        "message_id",
        "correlation_id",
        "causation_id",
        "deadline",
        "published_at",
        "kept_at",
        "attempts",
        "next_attempt_at",
        "dead_lettered_at",
        "claimed_until",
        "claimer",
        "claimer_heartbeat",
    )
    content_fields = ("payload_json", "last_error")
    actions = ("requeue_kept_events",)

    @admin.display(description=_("saga"), ordering="saga__saga_type")
    def saga_link(self, obj: SagaKeptEvent) -> SafeString:
        return link_to_saga(self, obj.saga)

    @admin.display(description=_("correlation key"), ordering="correlation_key")
    def key(self, obj: SagaKeptEvent) -> str:
        return obj.correlation_key or "-"

    @admin.display(description=_("status"))
    def status(self, obj: SagaKeptEvent) -> str:
        if obj.saga_id is None and obj.dead_lettered_at is None:
            return str(_("waiting for its saga to start"))
        return _status_label(obj)

    @admin.display(description=_("payload"))
    def payload_json(self, obj: SagaKeptEvent) -> SafeString:
        return _pretty_json(obj.payload)

    def has_requeue_permission(self, request: HttpRequest) -> bool:
        """Requeueing is gated on the model's change permission (the admin edits nothing)."""
        return bool(request.user.has_perm("bsft_saga.change_sagakeptevent"))

    @admin.action(
        description=_("Requeue selected dead-lettered kept events"), permissions=["requeue"]
    )
    def requeue_kept_events(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        ids = list(queryset.values_list("pk", flat=True))
        result = kept.requeue_dead_lettered(ids, user=request.user)
        requeued = ngettext(
            "%(count)d dead-lettered kept event was requeued; it is applied once its saga "
            "is at its step (the next drain, if it is there).",
            "%(count)d dead-lettered kept events were requeued; each is applied once its "
            "saga is at its step (the next drain, if it is there).",
            result.requeued,
        )
        report_requeue(self, request, result, noun=("kept event", "kept events"), requeued=requeued)

    def audited_saga(self, obj: SagaKeptEvent) -> SagaInstance | None:
        return obj.saga
