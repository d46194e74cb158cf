"""Serializers: progress metadata for the list, state and timers for the detail.

A datetime stored out of range (by an earlier release, or by hand) cannot be read back; the
views load rows with :func:`bsft_saga.db.datetimes.readable_rows`, and such a value is
serialized as ``null``, its field named in the row's extra key ``unreadable_fields``
(present only on such a row).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from bsft_saga import clock
from bsft_saga.db.datetimes import readable_rows, unreadable_fields
from bsft_saga.dispatchers import LISTED
from bsft_saga.history import ENTRY_FIELDS
from bsft_saga.listing import listed_delayed_messages, listed_kept_events
from bsft_saga.models import (
    DispatcherKind,
    SagaInstance,
    SagaJournalEntry,
    SagaKeptEvent,
    SagaOutboxMessage,
    SagaTimeout,
)
from bsft_saga.timeouts.listing import listed_timers

#: The key that names a row's unreadable datetime fields (only on such a row).
UNREADABLE_KEY = "unreadable_fields"

INSTANCE_FIELDS = list(SagaInstance.PROGRESS_FIELDS)

TIMER_FIELDS = [
    "id",
    "name",
    "due_at",
    "event_type",
    "payload",
    "calendar_key",
    "correlation_id",
    "scope",
    "scheduled_at",
    "attempts",
    "last_error",
    "dispatched_at",
    "outcome",
    "dead_lettered_at",
    "dead_letter_reason",
]

#: What the detail shows of a delayed message still waiting: when it will be delivered, not
#: what it carries.
DELAYED_MESSAGE_FIELDS = ["id", "event_type", "created_at", "deliver_at"]


class ReadableDatetimesMixin:
    """Serializes an unreadable datetime as ``null`` and names it in ``unreadable_fields``."""

    def to_representation(self, instance: Any) -> Any:
        data = super().to_representation(instance)  # type: ignore[misc]
        unreadable = unreadable_fields(instance)
        if unreadable:
            for name in unreadable:
                if name in data:
                    data[name] = None
            data[UNREADABLE_KEY] = list(unreadable)
        return data


class SagaInstanceSerializer(ReadableDatetimesMixin, serializers.ModelSerializer[SagaInstance]):
    class Meta:
        model = SagaInstance
        fields = INSTANCE_FIELDS
        read_only_fields = INSTANCE_FIELDS


class SagaTimeoutSerializer(ReadableDatetimesMixin, serializers.ModelSerializer[SagaTimeout]):
    class Meta:
        model = SagaTimeout
        fields = TIMER_FIELDS
        read_only_fields = TIMER_FIELDS


class SagaDelayedMessageSerializer(
    ReadableDatetimesMixin, serializers.ModelSerializer[SagaOutboxMessage]
):
    class Meta:
        model = SagaOutboxMessage
        fields = DELAYED_MESSAGE_FIELDS
        read_only_fields = DELAYED_MESSAGE_FIELDS


KEPT_EVENT_FIELDS = [
    "event_type",
    "step_index",
    "message_id",
    "correlation_id",
    "causation_id",
    "deadline",
    "published_at",
    "kept_at",
    "attempts",
    "next_attempt_at",
    "dead_lettered_at",
    "payload",
]


class SagaKeptEventSerializer(ReadableDatetimesMixin, serializers.ModelSerializer[SagaKeptEvent]):
    class Meta:
        model = SagaKeptEvent
        fields = KEPT_EVENT_FIELDS
        read_only_fields = KEPT_EVENT_FIELDS


JOURNAL_FIELDS = list(ENTRY_FIELDS)


class SagaJournalEntrySerializer(
    ReadableDatetimesMixin, serializers.ModelSerializer[SagaJournalEntry]
):
    """One entry of an instance's journal: metadata only, never state or payload.

    ``timer_name`` is the timer's name only when the serializer's context says
    ``timer_names`` (the user may see timers: ``may_see_timers``); else ``null``, also for an
    entry that names no timer (``""`` to those who may see timers).
    """

    timer_name = serializers.SerializerMethodField(
        help_text="The timer that delivered the event or that the action was about ('': "
        "none); null unless the user may see timers (bsft_saga.view_sagatimeout)."
    )

    class Meta:
        model = SagaJournalEntry
        fields = JOURNAL_FIELDS
        read_only_fields = JOURNAL_FIELDS

    def get_timer_name(self, entry: SagaJournalEntry) -> str | None:
        return entry.timer_name if self.context.get("timer_names") else None


class SagaInstanceDetailSerializer(SagaInstanceSerializer):
    """Adds the state (plain JSON, as stored), the instance's timers, its delayed messages
    and its kept events, each with how many there are in all.

    ``timeouts`` holds every pending timer and the ``RETIRED_TIMERS_LISTED`` newest
    retired ones (``bsft_saga.timeouts.listing``); ``timeouts_total`` counts them all, and
    ``GET instances/<id>/timeouts/`` pages through the rest. ``delayed_messages``: the
    ``ROWS_LISTED`` soonest of those its steps published that still wait for their
    ``deliver_at`` (event types and times, not payloads); ``kept_events``: the
    ``ROWS_LISTED`` oldest events kept for a later step (``keep_early``), with their
    payloads (content, audited with the rest of the detail) (``bsft_saga.listing``). Their
    ``_total`` counts them all; ``GET instances/<id>/delayed-messages/`` and
    ``GET instances/<id>/kept-events/`` page through them.
    """

    timeouts = serializers.SerializerMethodField()
    timeouts_total = serializers.SerializerMethodField()
    delayed_messages = serializers.SerializerMethodField()
    delayed_messages_total = serializers.SerializerMethodField()
    kept_events = serializers.SerializerMethodField()
    kept_events_total = serializers.SerializerMethodField()

    class Meta(SagaInstanceSerializer.Meta):
        fields = [
            *INSTANCE_FIELDS,
            "state",
            "timeouts",
            "timeouts_total",
            "delayed_messages",
            "delayed_messages_total",
            "kept_events",
            "kept_events_total",
        ]
        read_only_fields = fields

    @extend_schema_field(SagaKeptEventSerializer(many=True))
    def get_kept_events(self, instance: SagaInstance) -> Any:
        return SagaKeptEventSerializer(readable_rows(listed_kept_events(instance)), many=True).data

    def get_kept_events_total(self, instance: SagaInstance) -> int:
        return instance.kept_events.count()

    @extend_schema_field(SagaDelayedMessageSerializer(many=True))
    def get_delayed_messages(self, instance: SagaInstance) -> Any:
        waiting = listed_delayed_messages(instance, clock.now())
        return SagaDelayedMessageSerializer(readable_rows(waiting), many=True).data

    def get_delayed_messages_total(self, instance: SagaInstance) -> int:
        return instance.outbox_messages.waiting(clock.now()).count()

    @extend_schema_field(SagaTimeoutSerializer(many=True))
    def get_timeouts(self, instance: SagaInstance) -> Any:
        return SagaTimeoutSerializer(readable_rows(listed_timers(instance)), many=True).data

    def get_timeouts_total(self, instance: SagaInstance) -> int:
        return instance.timeouts.count()


class SagaDispatcherStatusSerializer(serializers.Serializer[dict[str, object]]):
    """One entry of ``dispatchers`` in ``GET status/``: a process that runs passes."""

    id = serializers.UUIDField(help_text="Its identity; claimed rows name it in claimed_by.")
    kind = serializers.ChoiceField(choices=DispatcherKind.choices)
    host = serializers.CharField()
    pid = serializers.IntegerField()
    started_at = serializers.DateTimeField(
        allow_null=True, help_text="When it started; null when the stored value cannot be read."
    )
    last_pass_at = serializers.DateTimeField()
    delivered = serializers.IntegerField(help_text="Rows its passes delivered since it started.")
    claims = serializers.IntegerField(help_text="Rows its pass in progress holds.")
    idle_seconds = serializers.FloatField(help_text="Now minus last_pass_at, never negative.")
    stale = serializers.BooleanField(
        help_text="Whether idle_seconds is above stale_after_seconds, or last_pass_at lies more "
        "than stale_after_seconds after now (a clock far ahead: no sign of life)."
    )


class SagaStatusSerializer(serializers.Serializer[dict[str, object]]):
    """``GET status/``: the document of ``manage.py saga_status --format json``."""

    active_instances = serializers.IntegerField(help_text="Instances not yet complete.")
    timeouts_pending = serializers.IntegerField(help_text="Timers not yet fired, due or not.")
    timeouts_due = serializers.IntegerField(
        help_text="Pending timers whose due_at has passed (a retry back-off included)."
    )
    timeouts_dead_lettered = serializers.IntegerField(help_text="Dead-lettered timers.")
    timeouts_unconfirmed = serializers.IntegerField(
        help_text="Fired timers still owed to a receiver; 0: no such state exists."
    )
    outbox_undelivered = serializers.IntegerField(
        help_text="Outbox rows neither delivered nor dead-lettered whose time has come."
    )
    outbox_scheduled = serializers.IntegerField(
        help_text="Delayed messages waiting for their deliver_at (not due, no lag)."
    )
    outbox_dead_lettered = serializers.IntegerField(help_text="Dead-lettered outbox rows.")
    lag_seconds = serializers.FloatField(
        help_text="Now minus the oldest due timer's due_at or due outbox row's "
        "deliver_at (created_at for a row delivered at once); 0 when there is none."
    )
    events_kept = serializers.IntegerField(
        help_text="Events kept for a later step of their saga (keep_early), or for a key whose "
        "saga has not started yet, not applied yet (dead letters apart)."
    )
    kept_dead_lettered = serializers.IntegerField(
        help_text="Kept events given up after MAX_DISPATCH_ATTEMPTS failed attempts."
    )
    idle_seconds = serializers.FloatField(
        allow_null=True,
        help_text="Now minus the newest last_pass_at of the dispatchers that report in, "
        "leaving out one more than stale_after_seconds after now; null when none is left.",
    )
    stale_after_seconds = serializers.FloatField(
        help_text="DELIVERY['STALE_AFTER']: a dispatcher whose last pass is older is stale."
    )
    idle_warning = serializers.CharField(
        allow_null=True,
        help_text="'no dispatcher has passed in N s' when none has within stale_after_seconds "
        "('no dispatcher has reported' when none reports); null while one has.",
    )
    dispatchers = SagaDispatcherStatusSerializer(
        many=True, help_text=f"The dispatchers that passed last, newest first (at most {LISTED})."
    )
