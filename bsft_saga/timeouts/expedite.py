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

from bsft_saga import clock, journal
from bsft_saga.audit import FIRED_NOW, record_action
from bsft_saga.models import JournalKind, SagaTimeout
from bsft_saga.moments import format_moment
from bsft_saga.timeouts.requests import DEADLINE_TIMER_NAME

__all__ = ["DEADLINE_PERMISSION", "FireNowReport", "fire_now", "may_move_deadline"]

#: Firing a ``with_deadline`` timer runs the flow's ``on_expired``, which usually ends the
#: saga: it needs what terminating one needs (the admin's ``terminate_sagas`` permission).
#: So does rescheduling it (:mod:`bsft_saga.timeouts.edits`), which moves the deadline.
DEADLINE_PERMISSION = "bsft_saga.terminate_saga"


@dataclass(frozen=True)
class FireNowReport:
    """What :func:`fire_now` did, in the order the ids came.

    - ``due_now``: timers that are due now and held by nobody; the next pass fires them.
    - ``held``: ``(timer id, message)`` for each timer made due that a dispatcher's claim
      still holds: it fires when that dispatcher delivers it or, if that dispatcher died,
      once the claim's lease (``claimed_until``, which the message names) has run out.
    - ``refused``: ``(timer id, reason)`` for each timer left as it was.
    """

    due_now: int = 0
    held: list[tuple[int, str]] = field(default_factory=list)
    refused: list[tuple[int, str]] = field(default_factory=list)


def fire_now(ids: Iterable[int], *, user: Any = None, now: datetime | None = None) -> FireNowReport:
    """Make the pending timers in ``ids`` due at ``now``; the next drain pass fires them.

    ``due_at`` becomes ``now`` and a waiting retry back-off (``next_attempt_at``) is
    dropped; ``attempts`` and the ``message_id`` stay, so receivers see the same message.
    The event is not published here: the timer fires through the dispatcher like any other
    (the catch-up policy sees it as just due). A timer a dispatcher has claimed is made due
    too, but reported as ``held``: the claim decides when it fires. One audit record per
    timer made due (``action="saga.timeout.fire-now"``, naming its saga) and one
    ``fired_now`` entry in its saga's journal are written in the same transaction.

    Refused: a timer that does not exist or is no longer pending, and a ``with_deadline``
    timer (``bsft_saga.deadline``) when ``user`` lacks ``DEADLINE_PERMISSION`` (``user=None``,
    code or a command run by the operator, may fire it).
    """
    moment = now or clock.now()
    wanted = list(dict.fromkeys(int(pk) for pk in ids))
    # Only what the messages and the audit need: a date stored out of range (which firing
    # now replaces) must not stop the action.
    rows = (
        SagaTimeout.objects.filter(pk__in=wanted)
        .select_related("saga")
        .only(
            "id",
            *journal.TIMER_FIELDS,
            "saga__saga_type",
            "saga__correlation_key",
            "saga__step_index",
        )
        .in_bulk()
    )
    held: list[tuple[int, str]] = []
    refused: list[tuple[int, str]] = []
    due_now = 0
    for pk in wanted:
        row = rows.get(pk)
        if row is None:
            refused.append((pk, f"timer {pk} does not exist"))
            continue
        if row.name == DEADLINE_TIMER_NAME and not may_move_deadline(user):
            refused.append(
                (
                    pk,
                    f"timer {row.name!r} (id {pk}) is the deadline of {row.saga}: firing it "
                    f"runs the flow's on_expired, which needs the permission "
                    f"{DEADLINE_PERMISSION}",
                )
            )
            continue
        with transaction.atomic():
            moved = (
                SagaTimeout.objects.pending()
                .filter(pk=pk)
                .update(due_at=moment, next_attempt_at=None)
            )
            # Read under the row lock the update took: a claim cannot change meanwhile.
            claimed_until = (
                SagaTimeout.objects.claimed(moment)
                .filter(pk=pk)
                .values_list("claimed_until", flat=True)
                .first()
                if moved
                else None
            )
            if moved:
                record_action(FIRED_NOW, user=user, saga=row.saga)
                journal.record_timer_action(
                    row, JournalKind.FIRED_NOW, user=user, step=row.saga.step_index, at=moment
                )
        if not moved:
            outcome = SagaTimeout.objects.filter(pk=pk).values_list("outcome", flat=True).first()
            refused.append((pk, f"timer {row.name!r} (id {pk}) is not pending ({outcome})"))
        elif claimed_until is not None:
            held.append(
                (
                    pk,
                    f"timer {row.name!r} (id {pk}) is held by another dispatcher's claim until "
                    f"{format_moment(claimed_until)}; it fires when that "
                    "dispatcher delivers it or once the lease ends",
                )
            )
        else:
            due_now += 1
    return FireNowReport(due_now=due_now, held=held, refused=refused)


def may_move_deadline(user: Any) -> bool:
    """Whether ``user`` may fire or reschedule a ``with_deadline`` timer: one who holds
    ``DEADLINE_PERMISSION``, or ``None`` (code, or a command run by the operator)."""
    return user is None or bool(user.has_perm(DEADLINE_PERMISSION))
