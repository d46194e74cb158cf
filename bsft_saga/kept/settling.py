"""What a commit that moves a saga on does to its kept rows (in that commit)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime

from bsft_saga.conf import saga_settings
from bsft_saga.kept.discarding import discard_rows
from bsft_saga.models import SagaKeptEvent

#: The first step after a step that awaits an event type (``FlowDefinition.next_awaiting``).
NextAwaiting = Callable[[int, str], "int | None"]


def adopt(saga_id: uuid.UUID, saga_type: str, correlation_key: str, *, now: datetime) -> int:
    """Give the saga just created for its key the events kept for that key within
    ``KEEP_EARLY_FOR`` (in the creating transaction); return how many."""
    since = now - saga_settings.engine.keep_early_for
    return (
        SagaKeptEvent.objects.without_saga()
        .filter(saga_type=saga_type, correlation_key=correlation_key, kept_at__gte=since)
        .update(saga_id=saga_id)
    )


def move_on(
    saga_id: uuid.UUID, next_awaiting: NextAwaiting, *, reached: int, now: datetime
) -> None:
    """Settle the kept rows of a saga that reaches step ``reached`` (current transaction).

    A row for an earlier step goes to the next step from ``reached`` on that awaits its
    type, or is discarded (:func:`~bsft_saga.kept.discarding.discard_rows`) if no step can
    take it any more. The rows for ``reached`` become ready now.
    """
    passed = SagaKeptEvent.objects.filter(saga_id=saga_id, step_index__lt=reached)
    untaken = []
    for event_type in set(passed.values_list("event_type", flat=True)):
        step = next_awaiting(reached - 1, event_type)
        if step is None:
            untaken.append(event_type)
        else:
            passed.filter(event_type=event_type).update(step_index=step, next_attempt_at=None)
    if untaken:
        discard_rows(passed.filter(event_type__in=untaken))
    SagaKeptEvent.objects.pending().filter(
        saga_id=saga_id, step_index=reached, next_attempt_at__isnull=True
    ).update(next_attempt_at=now)


def forget(kept_id: int) -> None:
    """Delete the kept row that the current window applies."""
    SagaKeptEvent.objects.filter(pk=kept_id).delete()
