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
