"""Kept events: an event that reached its saga before the step that awaits it.

A wait declared with ``keep_early=True`` keeps an event of its type that reaches an active
saga at an earlier step (one that does not await the type), and one that reaches a key with
no active saga yet (for ``ENGINE.KEEP_EARLY_FOR``: the saga that starts for the key takes
it). Keeping is a window of its own: a version-checked ``UPDATE`` of the saga that leaves
its version as it is (so keeping and the commit that moves the saga on are serialised,
whichever loses re-plans against the other's result, and the journal's versions follow one
another), and the ``SagaKeptEvent`` row, unique per saga (or key) and message id (so a
redelivered event is kept once, as the inbox handles it once). At most
``ENGINE.MAX_KEPT_EVENTS_PER_SAGA`` rows per saga (or key).

A kept event is a row of the third delivery channel (:data:`KEPT`): it has the attempts,
retry back-off, dead letter and requeue of timers and outbox rows, and their claim (a
process killed while applying one is charged that attempt), but it is applied to its one
saga, never published to every receiver. Every commit that moves a saga of a flow that
keeps events settles its kept rows (:func:`move_on`, called by the window): a row for a step
the saga passed goes to the next step that awaits its type, or is discarded (counted ignored,
``not_awaited``) if none does; a row for the step reached becomes ready
(``next_attempt_at``). That commit's ``on_commit`` applies the ready rows oldest first,
each in a window of its own (``handler.apply_kept``), which deletes the row it applies.
A crash between the two, a failed attempt whose back-off has run out, or a requeue leaves
ready rows behind: the drain pass applies them (``handler.apply_stragglers``), found through
the partial index of ready rows.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Collection
from datetime import datetime
from functools import partial
from types import MappingProxyType
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Count, F, OuterRef, Subquery

from bsft_saga import clock, journal, telemetry
from bsft_saga.conf import saga_settings
from bsft_saga.delivery import claim as delivery_claim
from bsft_saga.delivery.channel import Channel
from bsft_saga.delivery.claim import Claimed
from bsft_saga.events import codec, payloads
from bsft_saga.events.envelope import Envelope
from bsft_saga.events.registry import event_class, event_type_of
from bsft_saga.models import JournalKind, SagaInstance, SagaKeptEvent
from bsft_saga.querysets import SagaKeptEventQuerySet

logger = logging.getLogger(__name__)

#: What :func:`keep` did with an event.
KEPT_NOW = "kept"
DUPLICATE = "duplicate"
OVER_LIMIT = "kept_limit"

#: The first step after a step that awaits an event type (``FlowDefinition.next_awaiting``).
NextAwaiting = Callable[[int, str], "int | None"]


class LostRace(Exception):
    """The saga moved on (or completed) since the plan read it: plan again."""


class _OverLimit(Exception):
    """The saga (or key) already keeps ``MAX_KEPT_EVENTS_PER_SAGA`` events: write nothing."""


def keep(
    saga_id: uuid.UUID,
    version: int,
    step_index: int,
    envelope: Envelope,
    *,
    saga_type: str,
    correlation_key: str,
    now: datetime,
) -> str:
    """Keep ``envelope`` for the step ``step_index`` of the saga read at ``version``.

    ``KEPT_NOW``; ``DUPLICATE``: the saga already kept this message id; ``OVER_LIMIT``: it
    keeps ``MAX_KEPT_EVENTS_PER_SAGA`` events already (nothing written either way).
    ``LostRace``: the saga's version moved on; nothing was written.
    """
    try:
        with transaction.atomic():
            # Locks the saga's row while it is still at ``version``, without moving it on:
            # keeping is no transition of the saga.
            locked = SagaInstance.objects.filter(
                pk=saga_id, version=version, is_complete=False
            ).update(updated_at=now)
            if not locked:
                raise LostRace
            if _full(SagaKeptEvent.objects.filter(saga_id=saga_id)):
                raise _OverLimit
            _create(envelope, step_index, saga_type, correlation_key, now, saga_id=saga_id)
    except _OverLimit:
        return OVER_LIMIT
    except IntegrityError:
        if SagaKeptEvent.objects.filter(saga_id=saga_id, message_id=envelope.message_id).exists():
            return DUPLICATE
        raise
    return KEPT_NOW


def keep_for_key(
    saga_type: str, correlation_key: str, step_index: int, envelope: Envelope, *, now: datetime
) -> str:
    """Keep ``envelope`` for the saga that starts for ``saga_type`` and ``correlation_key``
    within ``KEEP_EARLY_FOR`` (none is active now), for its step ``step_index``.

    ``KEPT_NOW``, ``DUPLICATE`` or ``OVER_LIMIT``, as :func:`keep`.
    """
    unowned = SagaKeptEvent.objects.without_saga().filter(
        saga_type=saga_type, correlation_key=correlation_key
    )
    if _full(unowned):
        return OVER_LIMIT
    try:
        with transaction.atomic():
            _create(envelope, step_index, saga_type, correlation_key, now, saga_id=None)
    except IntegrityError:
        if unowned.filter(message_id=envelope.message_id).exists():
            return DUPLICATE
        raise
    return KEPT_NOW


def _full(rows: SagaKeptEventQuerySet) -> bool:
    limit = saga_settings.engine.max_kept_events_per_saga
    return rows.order_by().values("pk")[limit - 1 : limit].exists()


def _create(
    envelope: Envelope,
    step_index: int,
    saga_type: str,
    correlation_key: str,
    now: datetime,
    *,
    saga_id: uuid.UUID | None,
) -> None:
    SagaKeptEvent.objects.create(
        saga_id=saga_id,
        saga_type=saga_type,
        correlation_key=correlation_key,
        step_index=step_index,
        event_type=envelope.event_type,
        payload=payloads.encode_event(envelope.event, envelope.event_type),
        message_id=envelope.message_id,
        correlation_id=envelope.correlation_id or "",
        causation_id=envelope.causation_id,
        deadline=envelope.deadline,
        published_at=envelope.published_at,
        kept_at=now,
    )


# -- what a commit that moves a saga does to its kept rows ---------------------------------


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
    type, or is discarded (:func:`_discard`) if no step can take it any more. The rows for
    ``reached`` become ready now.
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
        _discard(passed.filter(event_type__in=untaken))
    SagaKeptEvent.objects.pending().filter(
        saga_id=saga_id, step_index=reached, next_attempt_at__isnull=True
    ).update(next_attempt_at=now)


def discard(saga_id: uuid.UUID) -> None:
    """Discard the kept rows of a saga completing in the current transaction."""
    _discard(SagaKeptEvent.objects.filter(saga_id=saga_id))


def _discard(rows: SagaKeptEventQuerySet) -> int:
    """Delete ``rows``, kept events no step will apply: each that was still to be applied
    is counted ignored (``not_awaited``) once the current transaction commits (a dead
    letter was counted as one already). Return how many rows went.

    Every path that drops kept events unapplied comes here: a saga that moves past their
    step, one that completes, a key whose saga did not start within ``KEEP_EARLY_FOR``.
    """
    pending = list(rows.pending().order_by().values_list("saga_type").annotate(n=Count("pk")))
    deleted, _ = rows.delete()
    if pending:
        transaction.on_commit(partial(_count_discarded, pending))
    return deleted


def _count_discarded(pending: list[tuple[str, int]]) -> None:
    for saga_type, n in pending:
        for _ in range(n):
            telemetry.count_ignored(saga_type, "not_awaited")


def forget(kept_id: int) -> None:
    """Delete the kept row that the current window applies."""
    SagaKeptEvent.objects.filter(pk=kept_id).delete()


# -- applying ------------------------------------------------------------------------------


def next_kept(saga_id: uuid.UUID) -> SagaKeptEvent | None:
    """The oldest kept row still to be applied at the step the saga is at, or ``None``.

    It may not be ready (its retry back-off has not run out, another process holds it):
    the saga's younger rows wait behind it, so that they are applied in the order kept.
    """
    return (
        SagaKeptEvent.objects.pending()
        .filter(saga_id=saga_id, saga__is_complete=False, saga__step_index=F("step_index"))
        .order_by("kept_at", "id")
        .first()
    )


def claim(row: SagaKeptEvent, *, now: datetime) -> Claimed[SagaKeptEvent] | None:
    """Hold ``row`` for this process while it is applied (a lease of ``CLAIM_LEASE``), if it
    is ready and nobody holds it: the claimed row, reloaded, in ``rows``; ``None`` when it
    is not ready.

    The delivery machinery's claim of this one row, so a claim alone: a row whose previous
    claim ran out with the row still pending (the process applying it died) is charged an
    attempt (``ClaimAbandoned``), and at ``MAX_DISPATCH_ATTEMPTS`` it is dead-lettered
    instead (in ``dead_lettered``): a kept event that kills every process applying it is
    given up, not retried for ever.
    """
    if row.next_attempt_at is None or row.next_attempt_at > now:
        return None
    return delivery_claim.claim(
        KEPT,
        limit=1,
        token=uuid.uuid4(),
        now=now,
        lease=saga_settings.delivery.claim_lease,
        only=[row.pk],
    )


def release(row: SagaKeptEvent, token: uuid.UUID) -> None:
    """Give back the claim of a row that was not applied (its saga moved on meanwhile)."""
    KEPT.held(token).filter(pk=row.pk).update(claim_token=None, claimed_until=None)


def ready_sagas(
    limit: int, *, now: datetime, skip: Collection[uuid.UUID] = ()
) -> list[tuple[uuid.UUID, str, int]]:
    """Sagas with a ready kept row: ``(id, saga_type, flow_version)``, in the order their
    rows became ready, at most ``limit``, none of ``skip``. A row waiting out its back-off
    is not ready, so a saga whose kept event keeps failing takes no other saga's place."""
    ready = SagaKeptEvent.objects.claimable(now).filter(saga__is_complete=False)
    if skip:
        ready = ready.exclude(saga_id__in=list(skip))
    rows = ready.values_list("saga_id", "saga__saga_type", "saga__flow_version")[: limit * 4]
    sagas: dict[uuid.UUID, tuple[uuid.UUID, str, int]] = {}
    for saga_id, saga_type, flow_version in rows:
        sagas.setdefault(saga_id, (saga_id, saga_type, flow_version))
    return list(sagas.values())[:limit]


def envelope_of(row: SagaKeptEvent) -> Envelope:
    """Rebuild the envelope that was kept, with its own id, correlation id and deadline."""
    cls = event_class(row.event_type)
    return Envelope(
        message_id=row.message_id,
        event=codec.decode(cls, row.payload),
        event_type=event_type_of(cls),
        correlation_id=row.correlation_id or None,
        causation_id=row.causation_id,
        deadline=row.deadline,
        published_at=row.published_at or row.kept_at,
    )


# -- kept before their saga started ----------------------------------------------------------


def discard_expired(*, now: datetime, limit: int) -> int:
    """Discard up to ``limit`` events kept for a key whose saga did not start within
    ``KEEP_EARLY_FOR``; each is counted ignored (``not_awaited``). Return how many."""
    cutoff = now - saga_settings.engine.keep_early_for
    expired = SagaKeptEvent.objects.without_saga().filter(kept_at__lt=cutoff)
    pks = list(expired.order_by("kept_at").values_list("pk", flat=True)[:limit])
    return _discard(expired.filter(pk__in=pks)) if pks else 0


def unadopted(*, now: datetime, limit: int) -> list[tuple[uuid.UUID, str, str, int]]:
    """Sagas active for a key that has events kept before it started, within the window,
    not yet theirs (the saga started while the event was being kept):
    ``(id, saga_type, correlation_key, flow_version)``."""
    since = now - saga_settings.engine.keep_early_for
    active = SagaInstance.objects.active().filter(
        saga_type=OuterRef("saga_type"), correlation_key=OuterRef("correlation_key")
    )
    # One statement, down the index of rows without a saga; a key has one active saga.
    found = (
        SagaKeptEvent.objects.without_saga()
        .filter(kept_at__gte=since)
        .annotate(
            owner=Subquery(active.values("pk")[:1]),
            owner_version=Subquery(active.values("flow_version")[:1]),
        )
        .filter(owner__isnull=False)
        .order_by()
        .values_list("owner", "saga_type", "correlation_key", "owner_version")
        .distinct()[:limit]
    )
    return list(found)


# -- the channel -----------------------------------------------------------------------------


class KeptChannel(Channel[SagaKeptEvent]):
    """Kept events, for the delivery machinery's failures, dead letters and requeue.

    A kept event is pending until applied (deleted) or dead-lettered; it is ready once its
    saga is at its step (``next_attempt_at`` set). It is applied to its one saga
    (``handler.apply_kept``), never published to the receivers.
    """

    model = SagaKeptEvent
    noun = "kept event"
    dead_lettered_counter = "kept.dead_lettered"
    related = ("saga",)
    pending_where = MappingProxyType({"dead_lettered_at": None})

    def all_rows(self) -> SagaKeptEventQuerySet:
        return SagaKeptEvent.objects.all()

    def claimable(self, now: datetime) -> SagaKeptEventQuerySet:
        return SagaKeptEvent.objects.claimable(now)

    def pending_rows(self) -> SagaKeptEventQuerySet:
        return SagaKeptEvent.objects.pending()

    def delivered_rows(self) -> SagaKeptEventQuerySet:
        return SagaKeptEvent.objects.none()  # an applied kept event is deleted

    def delivered(self, now: datetime) -> dict[str, Any]:
        raise NotImplementedError("an applied kept event is deleted by the window applying it")

    def load_related(self, rows: list[SagaKeptEvent]) -> dict[Any, Any]:
        """Nothing: a claimed kept event is applied by its saga's own loop, whose plan reads
        the saga afresh (a requeue loads it, through ``related``)."""
        return {}

    def envelope(self, row: SagaKeptEvent, token: Any) -> Envelope:
        return envelope_of(row)

    def saga_of(self, row: SagaKeptEvent) -> uuid.UUID | None:
        return row.saga_id

    def saga_type(self, row: SagaKeptEvent) -> str:
        return row.saga_type

    def describe(self, row: SagaKeptEvent) -> str:
        key = row.correlation_key or "-"
        owner = f"saga {row.saga_type}[{key}]" if row.saga_id else f"key {row.saga_type}[{key}]"
        return f"kept event {row.event_type!r} (id {row.pk}, message {row.message_id}) of {owner}"

    def journal_entry(
        self, row: SagaKeptEvent, kind: JournalKind, now: datetime
    ) -> dict[str, Any] | None:
        """A kept event given up is in its saga's journal."""
        if kind != JournalKind.DEAD_LETTERED or row.saga_id is None:
            return None
        return journal.kept_entry(row, kind, at=now)

    def after_requeue(self, row: SagaKeptEvent) -> None:
        """A requeued row whose saga is at its step is ready at once; one for a later step
        becomes ready when the saga gets there."""
        if row.saga is not None and row.saga.step_index == row.step_index:
            SagaKeptEvent.objects.filter(pk=row.pk).update(next_attempt_at=clock.now())

    def requeue_refusal(self, row: SagaKeptEvent, user: Any) -> str | None:
        if row.saga is not None and row.saga.is_complete:
            return f"{self.describe(row)} belongs to a saga that has completed"
        return None


KEPT = KeptChannel()


def requeue_dead_lettered(ids: Any = None, *, user: Any = None, progress: Any = None) -> Any:
    """Make dead-lettered kept events pending again (``None``: all of them): one whose saga
    is at its step is applied by the next drain. Each requeue is audited under ``user``
    (``"saga.kept.requeued"``; ``None``: code or a command) and journaled. See
    ``bsft_saga.delivery.requeue``, also for ``progress``."""
    from bsft_saga.delivery import requeue

    wanted = None if ids is None else list(ids)
    return requeue.requeue_dead_lettered(KEPT, wanted, user=user, progress=progress)
