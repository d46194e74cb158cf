"""The flow's picture on an instance's admin page (``SagaInstanceAdmin.picture``).

The steps of the flow version the instance runs under, drawn by
:func:`bsft_saga.flows.picture.flow_svg` and marked with the instance's progress: where it
waits, its pending timers (name, due time and the wait they belong to; no payload), its
completion or termination, and a deadline that expired. Metadata only: it is shown to
anyone who may see the instance, the timers' names only to those who may see timers.
"""

from __future__ import annotations

from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext as _

from bsft_saga.db.datetimes import readable_rows
from bsft_saga.exceptions import UnknownFlowVersion
from bsft_saga.flows.picture import PendingTimer, flow_svg
from bsft_saga.flows.registry import flow_registry
from bsft_saga.models import JournalKind, SagaInstance, TimeoutOutcome
from bsft_saga.timeouts.requests import DEADLINE_TIMER_NAME

__all__ = ["instance_picture"]


def instance_picture(instance: SagaInstance, *, timer_names: bool) -> SafeString | str:
    """The instance's flow as an inline ``<svg>``; a sentence instead when no installed
    flow declares its saga type and version (its flow was removed, or a deploy rolled back).

    ``timer_names``: whether the viewer may see timers (``may_see_timers``); without it
    each pending timer is drawn in its wait's box with its due time, unnamed.

    Two or three queries: the pending timers, and whether the deadline expired (its journal
    entry, else its fired timer).
    """
    try:
        definition = flow_registry.definition_for(instance.saga_type, instance.flow_version)
    except UnknownFlowVersion:
        return _(
            "No installed flow declares %(saga_type)s version %(version)d, so its steps "
            "cannot be drawn."
        ) % {"saga_type": instance.saga_type, "version": instance.flow_version}
    pending = readable_rows(
        instance.timeouts.pending()
        # The deadline is drawn as the flow's note, not as a timer of the step it began at.
        .exclude(name=DEADLINE_TIMER_NAME)
        .only("name", "due_at", "scheduled_step_index")
        .order_by("due_at", "id")
    )
    timers = [
        PendingTimer(
            name=t.name if timer_names else None,
            step_index=t.scheduled_step_index,
            due_at=t.due_at,
        )
        for t in pending
    ]
    # The journal says so for as long as the instance is kept; an instance older than its
    # journal, by its fired deadline timer (which retention may have purged since).
    expired = (
        instance.journal.filter(kind=JournalKind.EXPIRED).exists()
        or instance.timeouts.filter(name=DEADLINE_TIMER_NAME, outcome=TimeoutOutcome.FIRED).exists()
    )
    svg = flow_svg(
        definition,
        step_index=instance.step_index,
        completed=instance.is_complete,
        pending_timers=timers,
        terminated=bool(instance.terminated_reason),
        expired=expired,
        deadline_at=instance.deadline,
    )
    # flow_svg escapes every text it draws (saga types, event, function and timer names).
    return mark_safe(svg)
