from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from sample_project.orders.models import Reminder


@admin.register(Reminder)
class ReminderAdmin(admin.ModelAdmin):
    """The reminders the quote saga's timers caused, read-only."""

    list_display = ["sent_at", "kind", "quote_id", "message_id"]
    list_filter = ["kind"]
    search_fields = ["quote_id"]
    date_hierarchy = "sent_at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Reminder | None = None) -> bool:
        return False
