"""Finding the kept rows to apply next, and holding one while it is applied."""

from __future__ import annotations

import uuid
from collections.abc import Collection
from datetime import datetime

from django.db.models import F, OuterRef, Subquery

from bsft_saga.conf import saga_settings
from bsft_saga.delivery import claim as delivery_claim
from bsft_saga.delivery.claim import Claimed
from bsft_saga.kept.channel import KEPT
from bsft_saga.models import SagaInstance, SagaKeptEvent


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
