"""Serializers: progress metadata for the list, state and timers for the detail."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from bsft_saga.models import SagaInstance, SagaTimeout
from bsft_saga.timeouts.listing import listed_timeouts

INSTANCE_FIELDS = list(SagaInstance.PROGRESS_FIELDS)

TIMEOUT_FIELDS = [
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


class SagaInstanceSerializer(serializers.ModelSerializer[SagaInstance]):
    class Meta:
        model = SagaInstance
        fields = INSTANCE_FIELDS
        read_only_fields = INSTANCE_FIELDS


class SagaTimeoutSerializer(serializers.ModelSerializer[SagaTimeout]):
    class Meta:
        model = SagaTimeout
        fields = TIMEOUT_FIELDS
        read_only_fields = TIMEOUT_FIELDS


class SagaInstanceDetailSerializer(SagaInstanceSerializer):
    """Adds the state (plain JSON, as stored), the instance's timers and their count.

    ``timeouts`` holds every pending timer and the ``RETIRED_TIMEOUTS_LISTED`` newest
    retired ones (``bsft_saga.timeouts.listing``); ``timeouts_total`` counts them all, and
    ``GET instances/<id>/timeouts/`` pages through the rest.
    """

    timeouts = serializers.SerializerMethodField()
    timeouts_total = serializers.SerializerMethodField()

    class Meta(SagaInstanceSerializer.Meta):
        fields = [*INSTANCE_FIELDS, "state", "timeouts", "timeouts_total"]
        read_only_fields = fields

    @extend_schema_field(SagaTimeoutSerializer(many=True))
    def get_timeouts(self, instance: SagaInstance) -> Any:
        return SagaTimeoutSerializer(listed_timeouts(instance), many=True).data

    def get_timeouts_total(self, instance: SagaInstance) -> int:
        return instance.timeouts.count()


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
        help_text="Outbox rows neither delivered nor dead-lettered."
    )
    outbox_dead_lettered = serializers.IntegerField(help_text="Dead-lettered outbox rows.")
    lag_seconds = serializers.FloatField(
        help_text="Now minus the oldest due timer's due_at or undelivered outbox row's "
        "created_at; 0 when there is none."
    )
