"""Serializers: progress metadata for the list, state and timers for the detail."""

from __future__ import annotations

from rest_framework import serializers

from bsft_saga.models import SagaInstance, SagaTimeout

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
    """Adds the state (plain JSON, as stored) and every timer of the instance."""

    timeouts = SagaTimeoutSerializer(many=True, read_only=True)

    class Meta(SagaInstanceSerializer.Meta):
        fields = [*INSTANCE_FIELDS, "state", "timeouts"]
        read_only_fields = fields


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
