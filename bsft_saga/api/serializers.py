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
