"""The delivery channel of timer rows (``SagaTimeout``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from types import MappingProxyType
from typing import Any

from django.db import transaction
from django.db.models import F, QuerySet

from bsft_saga import clock, journal, telemetry
from bsft_saga.conf import saga_settings
from bsft_saga.db import sql
from bsft_saga.delivery.channel import Channel, Sorted, written_scope
from bsft_saga.delivery.report import Outcome
from bsft_saga.engine import lookup
from bsft_saga.events import codec
from bsft_saga.events.envelope import Envelope, TimerOrigin
from bsft_saga.events.registry import event_class, event_type_of
from bsft_saga.models import (
    JournalKind,
    SagaInstance,
    SagaTimeout,
    TimeoutOutcome,
    TimeoutScope,
)
from bsft_saga.querysets import SagaTimeoutQuerySet
from bsft_saga.timeouts.catch_up import select_missed
from bsft_saga.timeouts.expedite import DEADLINE_PERMISSION, may_move_deadline
from bsft_saga.timeouts.requests import DEADLINE_TIMER_NAME


class TimerChannel(Channel[SagaTimeout]):
    """Timers: open while pending, retired with an ``outcome`` and ``dispatched_at``."""

    model = SagaTimeout
    noun = "timer"
    counters = MappingProxyType(
        {
            Outcome.DELIVERED: "timeout.fired",
            Outcome.MISSED: "timeout.missed",
            Outcome.DEAD_LETTERED: "timeout.dead_lettered",
        }
    )
    related = ("saga",)
    pending_where = MappingProxyType({"dispatched_at": None})
    #: Every timer is part of its saga's story: one that fired without waking a step of it
    #: (plain receivers sent the reminder), was missed or was dead-lettered has an entry.
    journal_kinds = MappingProxyType(
        {
            Outcome.DELIVERED: JournalKind.TIMER_FIRED,
            Outcome.MISSED: JournalKind.TIMER_MISSED,
            Outcome.DEAD_LETTERED: JournalKind.DEAD_LETTERED,
        }
    )

    def all_rows(self) -> SagaTimeoutQuerySet:
        return SagaTimeout.objects.all()

    def claimable(self, now: datetime) -> SagaTimeoutQuerySet:
        return SagaTimeout.objects.claimable(now)

    def pending_rows(self) -> SagaTimeoutQuerySet:
        return SagaTimeout.objects.pending()

    def delivered_rows(self) -> SagaTimeoutQuerySet:
        return SagaTimeout.objects.filter(outcome=TimeoutOutcome.FIRED)

    def stamped(self, outcome: Outcome, now: datetime, *, reason: str) -> dict[str, Any]:
        """A timer retires with its ``outcome`` and ``dispatched_at`` (a dead letter with
        its reason)."""
        stamp: dict[str, Any] = {"dispatched_at": now, "outcome": _STORED_AS[outcome]}
        if outcome is Outcome.DEAD_LETTERED:
            stamp["dead_letter_reason"] = reason
        return stamp

    def journal_entry(self, row: SagaTimeout, kind: JournalKind, now: datetime) -> dict[str, Any]:
        return journal.timer_entry(row, kind, at=now)

    def envelope(self, row: SagaTimeout, token: uuid.UUID) -> Envelope:
        """The timer's event, under the correlation id it was scheduled with, marked as
        coming from this timer (which names its due and scheduling times), with its saga's
        deadline as it is now (none for a timer scheduled with ``ignore_deadline``)."""
        cls = event_class(row.event_type)
        try:
            event = codec.decode(cls, row.payload)
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"the stored {row.event_type!r} payload no longer decodes: {exc}"
            ) from exc
        return Envelope(
            message_id=row.message_id,
            event=event,
            event_type=event_type_of(cls),  # the primary name, also for a row under an alias
            correlation_id=row.correlation_id or None,
            causation_id=None,
            deadline=None if row.ignore_deadline else row.saga.deadline,
            published_at=clock.now(),
            timer=TimerOrigin(
                timer_id=row.pk,
                saga_id=row.saga_id,
                name=row.name,
                claim_token=token,
                due_at=row.due_at,
                scheduled_at=row.scheduled_at,
            ),
        )

    def saga_of(self, row: SagaTimeout) -> uuid.UUID:
        return row.saga_id

    def read(self, rows: QuerySet[SagaTimeout]) -> list[SagaTimeout]:
        """The timers of the query ``rows``, read as values and built without the ORM's work
        per row (:func:`bsft_saga.db.sql.loaded`)."""
        return sql.loaded(SagaTimeout, rows.values_list(*sql.attnames(SagaTimeout)), rows.db)

    def load_related(self, rows: list[SagaTimeout]) -> dict[Any, Any]:
        """Each timer's saga, and the lookup's answer for the step its event wakes there:
        one query for the batch (:func:`bsft_saga.engine.lookup.firing_sagas`)."""
        sagas = lookup.firing_sagas(rows)
        cache = SagaTimeout.saga.field.set_cached_value
        for row in rows:
            cache(row, sagas[row.pk].instance)
        return {timer_id: saga.answers for timer_id, saga in sagas.items()}

    def sort_out(
        self, rows: list[SagaTimeout], token: uuid.UUID, now: datetime
    ) -> Sorted[SagaTimeout]:
        """Retire the rows the catch-up policy discards as missed, in a commit of their own."""
        # The policy reads before the transaction opens: on SQLite a transaction that reads
        # first and writes later can be refused the write lock.
        missed_ids = select_missed(rows, saga_settings.timers, now)
        if not missed_ids:
            return Sorted(rows)
        with transaction.atomic():
            missed = self._stamp_missed([row for row in rows if row.pk in missed_ids], token)
        for row in missed:
            self.count(Outcome.MISSED, row.saga.saga_type)
        return Sorted(
            [row for row in rows if row.pk not in missed_ids],
            missed=len(missed),
            unclaimed=len(missed_ids) - len(missed),
            committed=True,
        )

    def _stamp_missed(self, rows: list[SagaTimeout], token: uuid.UUID) -> list[SagaTimeout]:
        """Retire ``rows`` as missed (one statement) with the journal entries of those this
        pass still held; return those."""
        ids, now = [row.pk for row in rows], clock.now()
        # Write first, then read which rows were ours (a read first could cost SQLite's lock).
        self.held(token).filter(pk__in=ids).update(**self.retire([], Outcome.MISSED, now).stamp)
        stamped = set(
            SagaTimeout.objects.filter(
                pk__in=ids, claim_token=token, outcome=TimeoutOutcome.MISSED
            ).values_list("pk", flat=True)
        )
        missed = [row for row in rows if row.pk in stamped]
        self.retire(missed, Outcome.MISSED, now).journal()
        return missed

    def saga_type(self, row: SagaTimeout) -> str:
        return row.saga.saga_type

    def describe(self, row: SagaTimeout) -> str:
        saga = row.saga
        return f"timer {row.name!r} (id {row.pk}) of saga {saga.saga_type}[{saga.correlation_key}]"

    def requeued(self) -> dict[str, Any]:
        return {"dispatched_at": None, "outcome": None, "dead_letter_reason": ""}

    def after_requeue(self, row: SagaTimeout) -> None:
        """A requeued timer is pending again: move its saga's version on, so that a step
        that read the saga before (and may end the wait without seeing this timer) loses
        its version check and re-reads."""
        SagaInstance.objects.filter(pk=row.saga_id).update(version=F("version") + 1)

    def requeue_refusal(self, row: SagaTimeout, user: Any) -> str | None:
        """A timer is not requeued into a saga that could not take it any more, nor a
        deadline timer for a ``user`` who may not move the deadline: requeued past its due
        time, it fires at the next pass and runs the flow's ``on_expired``."""
        if row.name == DEADLINE_TIMER_NAME and not may_move_deadline(user):
            return (
                f"{self.describe(row)} expires its saga when it fires: requeueing it needs "
                f"the permission {DEADLINE_PERMISSION}"
            )
        saga = row.saga
        if saga.is_complete:
            return (
                f"{self.describe(row)} belongs to a completed saga; its event would fire "
                "into the void"
            )
        if row.scope == TimeoutScope.STEP and saga.step_index > row.scheduled_step_index:
            return (
                f"{self.describe(row)} was scheduled for the saga's wait at step "
                f"{row.scheduled_step_index}, which has ended (the saga is at step "
                f"{saga.step_index}); requeued, it would wake a later step"
            )
        twin = (
            SagaTimeout.objects.pending()
            .filter(saga_id=row.saga_id, name=row.name)
            .values_list("pk", flat=True)
            .first()
        )
        if twin is not None:
            return (
                f"{self.describe(row)}: the saga already has a pending timer {row.name!r} "
                f"(id {twin}); cancel it or let it fire first"
            )
        return None

    @contextmanager
    def written_with(self, row: SagaTimeout) -> Iterator[None]:
        with written_scope(row.correlation_id, row.saga):
            yield

    @contextmanager
    def publishing(self, row: SagaTimeout) -> Iterator[None]:
        """Fire the timer under the correlation id and inside the saga it was scheduled
        with (so its span and every log record of its delivery name them, not the
        dispatcher's), in a ``saga.timeout`` span that links to the trace that scheduled it."""
        with (
            self.written_with(row),
            telemetry.timer_span(row.saga.saga_type, row.name, trace_context=row.trace_context),
        ):
            yield


#: How a timer retired with each outcome is stored.
_STORED_AS = {
    Outcome.DELIVERED: TimeoutOutcome.FIRED,
    Outcome.MISSED: TimeoutOutcome.MISSED,
    Outcome.DEAD_LETTERED: TimeoutOutcome.DEAD_LETTERED,
}

TIMERS = TimerChannel()
