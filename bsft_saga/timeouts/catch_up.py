"""Catch-up policies: which claimed due timers to discard as ``missed``."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Max

from bsft_saga.conf import TimerSettings
from bsft_saga.models import SagaTimeout
from bsft_saga.timeouts.requests import RESERVED_PREFIX


def select_missed(claimed: list[SagaTimeout], config: TimerSettings, now: datetime) -> set[int]:
    """Return the ids of ``claimed`` rows the configured policy discards.

    - ``fire_all``: none; the backlog is replayed oldest first.
    - ``fire_latest_per_saga``: every row of a saga that has a later due pending timer,
      so a long outage wakes each saga once, with its newest reminder.
    - ``skip_beyond_max_age``: rows overdue by more than ``MAX_CATCH_UP_AGE``.

    bsft_saga's own timers are never discarded: a deadline that passed during an outage
    must still expire its saga. The rows may change while the policy looks (a step cancels
    one, another fires): the policy only proposes; a proposed row this pass no longer holds
    is simply not stamped.
    """
    claimed = [row for row in claimed if not row.name.startswith(RESERVED_PREFIX)]
    policy = config.catch_up_policy
    if policy == "skip_beyond_max_age":
        oldest_allowed = now - config.max_catch_up_age
        return {row.pk for row in claimed if row.due_at < oldest_allowed}
    if policy == "fire_latest_per_saga":
        saga_ids = {row.saga_id for row in claimed}
        latest = dict(
            SagaTimeout.objects.pending()
            .filter(saga_id__in=saga_ids, due_at__lte=now)
            .exclude(name__startswith=RESERVED_PREFIX)
            .values("saga_id")
            .annotate(latest=Max("due_at"))
            .values_list("saga_id", "latest")
        )
        missed: set[int] = set()
        keep: dict[object, int] = {}
        for row in sorted(claimed, key=lambda r: (r.due_at, r.pk)):
            newest = latest.get(row.saga_id)
            if newest is None:
                continue  # none of the saga's timers is pending and due any more
            if row.due_at < newest:
                missed.add(row.pk)
            elif row.saga_id in keep:  # two rows due at the same instant: fire the later id
                missed.add(keep[row.saga_id])
                keep[row.saga_id] = row.pk
            else:
                keep[row.saga_id] = row.pk
        return missed
    return set()
