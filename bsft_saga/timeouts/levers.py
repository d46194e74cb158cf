"""An operator's levers on single timers: cancel them, or move one to another due time.

``manage.py cancel_saga_timeouts`` and ``manage.py reschedule_saga_timeout`` are thin
wrappers over :func:`cancel_timers` and :func:`reschedule_timer`.

Both act only on timers that are pending and **unclaimed**: a timer a dispatcher holds may
be firing right now, and changing it under the claim would either be lost (the claim's stamp
retires it anyway) or leave the operator believing something that is not true. Such a timer,
and one that is no longer pending, is refused with a reason that names it. Each change is
one conditional ``UPDATE`` in a transaction of its own with its audit record, so a dispatcher
claiming the timer at the same moment either sees the change or is seen by it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Q

from bsft_saga import clock, journal, telemetry
from bsft_saga.audit import TIMER_CANCELED, TIMER_RESCHEDULED, record_action
from bsft_saga.db.datetimes import storable
from bsft_saga.models import JournalKind, SagaTimeout, TimeoutOutcome
from bsft_saga.moments import format_moment
from bsft_saga.querysets import SagaTimeoutQuerySet

__all__ = ["CancelReport", "RescheduleReport", "cancel_timers", "reschedule_timer"]


@dataclass(frozen=True)
class CancelReport:
    """What :func:`cancel_timers` did: the ids it canceled, and ``(id, reason)`` for the
    rest, both in the order the ids came."""

    canceled: list[int] = field(default_factory=list)
    refused: list[tuple[int, str]] = field(default_factory=list)


@dataclass(frozen=True)
class RescheduleReport:
    """What :func:`reschedule_timer` did: the new due time, or why it refused."""

    timer_id: int
    due_at: datetime | None = None
    refused: str | None = None


def cancel_timers(
    ids: Iterable[int], *, user: Any = None, now: datetime | None = None
) -> CancelReport:
    """Cancel the pending, unclaimed timers in ``ids``: retired as ``canceled``, unpublished.

    One audit record per canceled timer (``action="saga.timeout.canceled"``, ``user``: the
    operator, ``None`` from a command) and one ``timer_canceled`` entry in its saga's
    journal, in the cancel's transaction. A ``with_deadline`` timer may be canceled too: the
    saga then has no deadline to expire it. Refused, and named: a timer that does not exist,
    is no longer pending, or is held by a dispatcher's claim.
    """
    moment = now or clock.now()
    report = CancelReport()
    for pk in dict.fromkeys(int(pk) for pk in ids):
        with transaction.atomic():
            changed = _unclaimed(moment, pk).update(
                dispatched_at=moment,
                outcome=TimeoutOutcome.CANCELED,
                next_attempt_at=None,
                claim_token=None,
                claimed_until=None,
            )
            timer = _timer_of(pk) if changed else None
            if timer is not None:
                record_action(TIMER_CANCELED, user=user, saga=timer.saga)
                _journal(timer, JournalKind.TIMER_CANCELED, user, moment)
        if timer is not None:
            report.canceled.append(pk)
            telemetry.count("timeout.canceled", timer.saga.saga_type)
        else:
            report.refused.append((pk, _refusal(pk, moment)))
    return report


def reschedule_timer(
    pk: int, due_at: datetime, *, user: Any = None, now: datetime | None = None
) -> RescheduleReport:
    """Move the pending, unclaimed timer ``pk`` to ``due_at`` (aware, within the dates
    bsft_saga stores: a ``ValueError`` otherwise).

    A waiting retry back-off is dropped; ``attempts``, the payload and the ``message_id``
    stay (receivers see the same message when it fires). One audit record
    (``action="saga.timeout.rescheduled"``) and one ``timer_rescheduled`` journal entry.
    Refused, with the reason: a timer that does not exist, is no longer pending, or is held
    by a dispatcher's claim.
    """
    moment = now or clock.now()
    when = storable(due_at, field="due_at", where=f"reschedule_timer({pk})")
    with transaction.atomic():
        changed = _unclaimed(moment, pk).update(due_at=when, next_attempt_at=None)
        timer = _timer_of(pk) if changed else None
        if timer is not None:
            record_action(TIMER_RESCHEDULED, user=user, saga=timer.saga)
            _journal(timer, JournalKind.TIMER_RESCHEDULED, user, moment)
    if timer is None:
        return RescheduleReport(pk, refused=_refusal(pk, moment))
    return RescheduleReport(pk, due_at=when)


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


def _journal(timer: SagaTimeout, kind: JournalKind, user: Any, moment: datetime) -> None:
    journal.record_timer_action(timer, kind, user=user, step=timer.saga.step_index, at=moment)


def _refusal(pk: int, moment: datetime) -> str:
    row = (
        SagaTimeout.objects.filter(pk=pk)
        .values("name", "outcome", "claimed_until", "saga__saga_type", "saga__correlation_key")
        .first()
    )
    if row is None:
        return f"timer {pk} does not exist"
    timer = (
        f"timer {row['name']!r} (id {pk}) of saga "
        f"{row['saga__saga_type']}[{row['saga__correlation_key']}]"
    )
    if row["outcome"] is not None:
        return f"{timer} is not pending ({row['outcome']})"
    until = row["claimed_until"]
    if until is not None and until >= moment:
        return (
            f"{timer} is held by a dispatcher's claim until "
            f"{format_moment(until)}; try again once it has fired or "
            "the lease has run out"
        )
    return f"{timer} changed while it was being changed; try again"
