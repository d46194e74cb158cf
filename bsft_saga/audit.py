"""Audit recorders: who read saga state and timer payloads.

An audit recorder is any object with ``record(*, action, user, saga_type, correlation_key,
instance_id) -> None``; ``BSFT_SAGA["API"]["AUDIT_RECORDER"]`` names its class.
"""

from __future__ import annotations

import uuid
from typing import Any, Protocol, runtime_checkable

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from bsft_saga import clock
from bsft_saga.conf import saga_settings
from bsft_saga.correlation import get_correlation_id

READ_CONTENT = "saga.instance.read-content"
#: An operator completed an active instance (``terminate_saga``, the admin action).
TERMINATED = "saga.instance.terminated"
#: An operator made a pending timer due at once (the admin action ``fire_now``).
FIRED_NOW = "saga.timeout.fire-now"
#: An operator returned a dead-lettered timer / outbox row to delivery (the admin actions
#: ``requeue_dead_lettered``, ``requeue_saga_timeouts``, ``requeue_saga_outbox``).
TIMER_REQUEUED = "saga.timeout.requeued"
OUTBOX_REQUEUED = "saga.outbox.requeued"
KEPT_REQUEUED = "saga.kept.requeued"
#: An operator canceled a pending timer / moved it to another due time
#: (``cancel_saga_timeouts``, ``reschedule_saga_timeout``).
TIMER_CANCELED = "saga.timeout.canceled"
TIMER_RESCHEDULED = "saga.timeout.rescheduled"
#: The action a requeue records, by the requeued row's model label.
REQUEUED = {
    "bsft_saga.SagaTimeout": TIMER_REQUEUED,
    "bsft_saga.SagaOutboxMessage": OUTBOX_REQUEUED,
    "bsft_saga.SagaKeptEvent": KEPT_REQUEUED,
}


@runtime_checkable
class AuditRecorder(Protocol):
    def record(
        self,
        *,
        action: str,
        user: Any,
        saga_type: str,
        correlation_key: str | None,
        instance_id: uuid.UUID | None,
    ) -> None: ...


class ModelAuditRecorder:
    """Stores each record as a ``SagaAuditRecord`` row (listed read-only in the admin)."""

    def record(
        self,
        *,
        action: str,
        user: Any,
        saga_type: str,
        correlation_key: str | None,
        instance_id: uuid.UUID | None,
    ) -> None:
        from bsft_saga.models import SagaAuditRecord

        authenticated = user is not None and getattr(user, "is_authenticated", False)
        SagaAuditRecord.objects.create(
            action=action,
            user=user if authenticated else None,
            username=user.get_username() if authenticated else "",
            saga_type=saga_type,
            correlation_key=correlation_key or "",
            instance_id=instance_id,
            correlation_id=get_correlation_id() or "",
            recorded_at=clock.now(),
        )


def record_action(action: str, *, user: Any, saga: Any) -> None:
    """Write one record of ``action`` by ``user`` about ``saga`` with the configured recorder.

    ``saga`` is a ``SagaInstance`` or ``None`` (an outbox row published without one: the
    record names no saga). Nothing is written when ``AUDIT_RECORDER`` is ``None``. Called
    inside the transaction of what it records, so the record and the change commit together.
    """
    recorder = get_audit_recorder()
    if recorder is None:
        return
    recorder.record(
        action=action,
        user=user,
        saga_type=saga.saga_type if saga is not None else "",
        correlation_key=(saga.correlation_key or None) if saga is not None else None,
        instance_id=saga.pk if saga is not None else None,
    )


def get_audit_recorder() -> AuditRecorder | None:
    """Build the configured recorder; ``None`` when ``AUDIT_RECORDER`` is ``None``."""
    path = saga_settings.api.audit_recorder
    if path is None:
        return None
    try:
        recorder = import_string(path)()
    except (ImportError, TypeError) as exc:
        raise ImproperlyConfigured(
            f"BSFT_SAGA['API']['AUDIT_RECORDER'] = {path!r} cannot be built: {exc}"
        ) from exc
    if not isinstance(recorder, AuditRecorder):
        raise ImproperlyConfigured(
            f"BSFT_SAGA['API']['AUDIT_RECORDER'] = {path!r} has no "
            "record(*, action, user, saga_type, correlation_key, instance_id) method"
        )
    return recorder
