"""Terminating sagas: an operator completes active instances at once, with a reason.

``manage.py terminate_saga`` and the admin action ``terminate_sagas`` are thin wrappers
over :func:`terminate`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from bsft_saga import clock, journal, kept, telemetry
from bsft_saga.audit import TERMINATED, get_audit_recorder
from bsft_saga.conf import saga_settings
from bsft_saga.models import JournalKind, SagaInstance
from bsft_saga.timeouts import store as timer_store

__all__ = ["TerminationReport", "terminate"]


@dataclass(frozen=True)
class TerminationReport:
    """What :func:`terminate` did: the ids it completed, and ``(id, reason)`` for the rest,
    both in the order the ids were given."""

    terminated: list[uuid.UUID] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)


def terminate(
    ids: Iterable[uuid.UUID | str], *, reason: str, user: Any = None
) -> TerminationReport:
    """Complete each active instance in ``ids`` now, canceling its pending timers.

    Each instance is completed in its own transaction, version-checked like a step's
    window: ``is_complete`` and ``completed_at`` set, ``terminated_reason`` stored, every
    pending timer canceled (its deadline too), its kept events discarded (counted ignored,
    ``not_awaited``), a ``terminated`` entry in its journal, and one audit record
    (``action="saga.instance.terminated"``, ``user``: the operator, ``None`` from a command)
    written with the configured recorder. Nothing runs: no step body, no ``on_expired``.

    Concurrency: a step that read the instance before the termination committed loses its
    version check, re-reads it, finds it complete and drops its event. A step that commits
    first moves the version on; the termination then re-reads the instance and terminates
    the newer version (or reports it refused when that step completed it).

    Refused, with a reason naming the instance: an id that is not a UUID or names no
    instance, and an instance that is already complete. A blank ``reason`` is a
    ``ValueError``: it is what the next operator reads.
    """
    why = reason.strip()
    if not why:
        raise ValueError("terminate(): reason must say why the sagas are terminated")
    result = TerminationReport()
    for given in dict.fromkeys(str(pk) for pk in ids):
        try:
            pk = uuid.UUID(given)
        except ValueError:
            result.refused.append((given, f"{given!r} is not a saga instance id (a UUID)"))
            continue
        refusal = _terminate_one(pk, why, user)
        if refusal is None:
            result.terminated.append(pk)
        else:
            result.refused.append((given, refusal))
    return result


def _describe(instance: SagaInstance) -> str:
    return f"saga {instance.saga_type}[{instance.correlation_key}] ({instance.pk})"


def _terminate_one(pk: uuid.UUID, reason: str, user: Any) -> str | None:
    """Terminate one instance; return why not, or ``None`` once it is done."""
    attempts = saga_settings.engine.max_conflict_retries + 1
    for _attempt in range(attempts):
        instance = SagaInstance.objects.filter(pk=pk).first()
        if instance is None:
            return f"saga instance {pk} does not exist"
        if instance.is_complete:
            return f"{_describe(instance)} is already complete"
        if _complete(instance, reason, user):
            return None
        # A step committed since the read above: look again, at the new version.
    return f"saga instance {pk} changed under concurrent events {attempts} times; try again"


def _complete(instance: SagaInstance, reason: str, user: Any) -> bool:
    now = clock.now()
    with transaction.atomic():
        # The same guard as a step's window: it matches only the version read, and it
        # takes the row lock, so a step in flight either committed before or loses after.
        completed = SagaInstance.objects.filter(
            pk=instance.pk, version=instance.version, is_complete=False
        ).update(
            is_complete=True,
            completed_at=now,
            updated_at=now,
            version=instance.version + 1,
            terminated_reason=reason,
        )
        if not completed:
            return False
        canceled = timer_store.cancel_all(instance.pk, now=now)
        kept.discard(instance.pk)  # events kept for a step it never runs
        journal.record_action(
            instance.pk,
            JournalKind.TERMINATED,
            user=user,
            step=instance.step_index,
            version=instance.version + 1,
            at=now,
        )
        recorder = get_audit_recorder()
        if recorder is not None:
            recorder.record(
                action=TERMINATED,
                user=user,
                saga_type=instance.saga_type,
                correlation_key=instance.correlation_key or None,
                instance_id=instance.pk,
            )
        transaction.on_commit(lambda: _report(instance.saga_type, canceled))
    return True


def _report(saga_type: str, canceled: int) -> None:
    telemetry.count("completed", saga_type)
    telemetry.count("timeout.canceled", saga_type, canceled)
