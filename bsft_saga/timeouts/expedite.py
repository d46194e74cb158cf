"""Firing pending timers now: in development, or when an incident cannot wait.

The admin action ``fire_now`` on the timer changelist is a thin wrapper over
:func:`fire_now`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction

from bsft_saga import clock
from bsft_saga.audit import FIRED_NOW, get_audit_recorder
from bsft_saga.models import SagaTimeout

__all__ = ["FireNowResult", "fire_now"]


@dataclass(frozen=True)
class FireNowResult:
    """How many timers are due now, and ``(timeout id, reason)`` for each one refused."""

    due_now: int = 0
    refused: list[tuple[int, str]] = field(default_factory=list)


def fire_now(ids: Iterable[int], *, user: Any = None, now: datetime | None = None) -> FireNowResult:
    """Make the pending timers in ``ids`` due at ``now``; the next drain pass fires them.

    ``due_at`` becomes ``now`` and a waiting retry back-off (``next_attempt_at``) is
    dropped; ``attempts`` and the ``message_id`` stay, so receivers see the same message.
    The event is not published here: the timer fires through the dispatcher like any other
    (the catch-up policy sees it as just due). One audit record per timer
    (``action="saga.timeout.fire-now"``, naming its saga) is written in the same
    transaction. A timer that does not exist or is no longer pending is refused.
    """
    moment = now or clock.now()
    wanted = list(dict.fromkeys(int(pk) for pk in ids))
    rows = SagaTimeout.objects.filter(pk__in=wanted).select_related("saga").in_bulk()
    refused: list[tuple[int, str]] = []
    due_now = 0
    recorder = get_audit_recorder()
    for pk in wanted:
        row = rows.get(pk)
        if row is None:
            refused.append((pk, f"timeout {pk} does not exist"))
            continue
        with transaction.atomic():
            moved = (
                SagaTimeout.objects.pending()
                .filter(pk=pk)
                .update(due_at=moment, next_attempt_at=None)
            )
            if moved and recorder is not None:
                recorder.record(
                    action=FIRED_NOW,
                    user=user,
                    saga_type=row.saga.saga_type,
                    correlation_key=row.saga.correlation_key or None,
                    instance_id=row.saga_id,
                )
        if moved:
            due_now += 1
        else:
            outcome = SagaTimeout.objects.filter(pk=pk).values_list("outcome", flat=True).first()
            refused.append((pk, f"timer {row.name!r} (id {pk}) is not pending ({outcome})"))
    return FireNowResult(due_now=due_now, refused=refused)
