"""Two operator actions on single timers: cancel them, or move one to another due time.

``manage.py cancel_saga_timeouts`` and ``manage.py reschedule_saga_timeout`` are thin
wrappers over :func:`cancel_timers` and :func:`reschedule_timer`.

Both act only on timers that are pending and held by no live claim: a timer a dispatcher
holds may be firing right now, and changing it under the claim would either be lost (the
claim's stamp retires it anyway) or leave the operator believing something that is not true.
Such a timer, and one that is no longer pending, is refused with a reason that names it. A
claim whose lease has run out no longer holds the timer, but the pass that took it may still
be running it: the action clears the claim's token, so that pass can no longer stamp the
timer (the step it woke does not commit, and the timer fires as the action left it). Each
change is one conditional ``UPDATE`` in a transaction of its own with its audit record and
its journal entry, so a dispatcher claiming the timer at the same moment either sees the
change or is seen by it.

The deadline timer of a ``with_deadline`` saga (``bsft_saga.deadline``) is that saga's
deadline. Rescheduling it moves ``SagaInstance.deadline`` with it, in the same transaction,
and needs what firing it now needs (``expedite.DEADLINE_PERMISSION``, unless ``user`` is
``None``). Canceling it is refused: the saga could then never expire (reschedule the
deadline, or terminate the saga).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import F, Q

from bsft_saga import clock, journal, telemetry
from bsft_saga.audit import TIMER_CANCELED, TIMER_RESCHEDULED, record_action
from bsft_saga.db.datetimes import storable
from bsft_saga.models import JournalKind, SagaInstance, SagaTimeout, TimeoutOutcome
from bsft_saga.moments import format_moment
from bsft_saga.querysets import SagaTimeoutQuerySet
from bsft_saga.timeouts.expedite import DEADLINE_PERMISSION, may_move_deadline
from bsft_saga.timeouts.requests import DEADLINE_TIMER_NAME

__all__ = ["CancelReport", "RescheduleReport", "cancel_timers", "reschedule_timer"]


@dataclass(frozen=True)
class CancelReport:
    """What :func:`cancel_timers` did: the ids it canceled, and ``(id, reason)`` for the
    rest, both in the order the ids came."""

    canceled: list[int] = field(default_factory=list)
    refused: list[tuple[int, str]] = field(default_factory=list)


@dataclass(frozen=True)
class RescheduleReport:
    """What :func:`reschedule_timer` did: the new due time, or why it refused;
    ``deadline_moved``: the timer was its saga's deadline, which moved with it."""

    timer_id: int
    due_at: datetime | None = None
    refused: str | None = None
    deadline_moved: bool = False


class _Refused(Exception):
    """Undoes a reschedule's writes: the timer was not there to move."""


def cancel_timers(
    ids: Iterable[int], *, user: Any = None, now: datetime | None = None
) -> CancelReport:
    """Cancel the pending, unclaimed timers in ``ids``: retired as ``canceled``, unpublished.

    One audit record per canceled timer (``action="saga.timeout.canceled"``, ``user``: the
    operator, ``None`` from a command) and one ``timer_canceled`` entry in its saga's
    journal, in the cancel's transaction. Refused, and named: a timer that does not exist,
    is no longer pending, is held by a dispatcher's claim, or is a saga's deadline timer
    (``bsft_saga.deadline``: the saga could then never expire; reschedule or terminate it).
    """
    moment = now or clock.now()
    report = CancelReport()
    for pk in dict.fromkeys(int(pk) for pk in ids):
        with transaction.atomic():
            changed = (
                _unclaimed(moment, pk)
                .exclude(name=DEADLINE_TIMER_NAME)
                .update(
                    dispatched_at=moment,
                    outcome=TimeoutOutcome.CANCELED,
                    next_attempt_at=None,
                    claim_token=None,
                    claimed_until=None,
                )
            )
            timer = _timer_of(pk) if changed else None
            if timer is not None:
                record_action(TIMER_CANCELED, user=user, saga=timer.saga)
                _journal(timer, JournalKind.TIMER_CANCELED, user, moment)
        if timer is not None:
            report.canceled.append(pk)
            telemetry.count("timeout.canceled", timer.saga.saga_type)
        else:
            report.refused.append((pk, _refusal(pk, moment, canceling=True)))
    return report


def reschedule_timer(
    pk: int, due_at: datetime, *, user: Any = None, now: datetime | None = None
) -> RescheduleReport:
    """Move the pending timer ``pk`` that no live claim holds to ``due_at`` (aware, within
    the dates bsft_saga stores: a ``ValueError`` otherwise).

    A waiting retry back-off is dropped; ``attempts``, the payload and the ``message_id``
    stay (receivers see the same message when it fires). A claim whose lease has run out is
    cleared: the pass that took the timer can no longer stamp it fired. One audit record
    (``action="saga.timeout.rescheduled"``) and one ``timer_rescheduled`` journal entry.

    The deadline timer (``bsft_saga.deadline``) moves its saga's deadline with it
    (``SagaInstance.deadline``, which ``ctx.deadline``, the events the saga publishes from
    then on and the flow picture show), in the same transaction, and moves the saga's
    version on, so that a step planned against the old deadline is planned again; the
    journal entry names that version. From a ``user`` without ``DEADLINE_PERMISSION`` it is
    refused.

    Refused, with the reason: a timer that does not exist, is no longer pending, or is held
    by a dispatcher's claim.
    """
    moment = now or clock.now()
    when = storable(due_at, field="due_at", where=f"reschedule_timer({pk})")
    target = SagaTimeout.objects.filter(pk=pk).values_list("name", "saga_id").first()
    deadline_of = target[1] if target is not None and target[0] == DEADLINE_TIMER_NAME else None
    if deadline_of is not None and not may_move_deadline(user):
        return RescheduleReport(pk, refused=_deadline_refusal(pk))
    try:
        with transaction.atomic():
            version = None if deadline_of is None else _move_deadline(deadline_of, when)
            changed = _unclaimed(moment, pk).update(
                due_at=when, next_attempt_at=None, claim_token=None, claimed_until=None
            )
            if not changed:
                raise _Refused  # the saga's deadline stays where it was
            timer = _timer_of(pk)
            record_action(TIMER_RESCHEDULED, user=user, saga=timer.saga)
            _journal(timer, JournalKind.TIMER_RESCHEDULED, user, moment, version=version)
    except _Refused:
        return RescheduleReport(pk, refused=_refusal(pk, moment))
    return RescheduleReport(pk, due_at=when, deadline_moved=deadline_of is not None)


def _move_deadline(saga_id: uuid.UUID, when: datetime) -> int:
    """Move the active saga's deadline to ``when`` and its version on; return that version.

    Written before the timer: every pass locks a saga's row before its timers, and so does
    this, so the two never wait for each other in opposite orders.
    """
    active = SagaInstance.objects.filter(pk=saga_id, is_complete=False)
    if not active.update(deadline=when, version=F("version") + 1):
        raise _Refused  # completed meanwhile (which retired its timers)
    return int(active.values_list("version", flat=True).get())


def _unclaimed(moment: datetime, pk: int) -> SagaTimeoutQuerySet:
    return (
        SagaTimeout.objects.pending()
        .filter(pk=pk)
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=moment))
    )


def _timer_of(pk: int) -> SagaTimeout:
    """The timer's name and its saga's metadata (for the audit record and the journal)."""
    return (
        SagaTimeout.objects.select_related("saga")
        .only(*journal.TIMER_FIELDS, "saga__saga_type", "saga__correlation_key", "saga__step_index")
        .get(pk=pk)
    )


def _journal(
    timer: SagaTimeout,
    kind: JournalKind,
    user: Any,
    moment: datetime,
    *,
    version: int | None = None,
) -> None:
    journal.record_timer_action(
        timer, kind, user=user, step=timer.saga.step_index, version=version, at=moment
    )


def _named(pk: int) -> tuple[str, Mapping[str, Any]] | None:
    """The timer ``pk`` as a refusal names it, and what the refusal reads of it."""
    row = (
        SagaTimeout.objects.filter(pk=pk)
        .values("name", "outcome", "claimed_until", "saga__saga_type", "saga__correlation_key")
        .first()
    )
    if row is None:
        return None
    timer = (
        f"timer {row['name']!r} (id {pk}) of saga "
        f"{row['saga__saga_type']}[{row['saga__correlation_key']}]"
    )
    return timer, row


def _deadline_refusal(pk: int) -> str:
    named = _named(pk)
    timer = named[0] if named is not None else f"timer {pk}"
    return (
        f"{timer} is the saga's deadline: rescheduling it moves the deadline (and, once "
        f"due, runs the flow's on_expired), which needs the permission {DEADLINE_PERMISSION}"
    )


def _refusal(pk: int, moment: datetime, *, canceling: bool = False) -> str:
    named = _named(pk)
    if named is None:
        return f"timer {pk} does not exist"
    timer, row = named
    if row["outcome"] is not None:
        return f"{timer} is not pending ({row['outcome']})"
    if canceling and row["name"] == DEADLINE_TIMER_NAME:
        return (
            f"{timer} is the saga's deadline: canceled, it would leave a saga that can "
            "never expire; reschedule it to move the deadline, or terminate the saga"
        )
    until = row["claimed_until"]
    if until is not None and until >= moment:
        return (
            f"{timer} is held by a dispatcher's claim until "
            f"{format_moment(until)}; try again once it has fired or "
            "the lease has run out"
        )
    return f"{timer} changed while it was being changed; try again"
