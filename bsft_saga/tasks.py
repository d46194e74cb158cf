"""Celery tasks: thin wrappers over the dispatcher and the outbox.

Schedule ``bsft_saga.tasks.drain_saga_timeouts`` with beat every ``POLL_INTERVAL``.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from dataclasses import asdict
from typing import Any

from celery import Task, current_app, current_task, shared_task
from celery.signals import worker_init, worker_process_shutdown, worker_shutdown

from bsft_saga import telemetry
from bsft_saga.signals import deferred_event_committed

logger = logging.getLogger(__name__)

DRAIN_TASK = "bsft_saga.tasks.drain_saga_timeouts"
#: The prefix of the ``deliver_event`` message headers that carry the W3C trace context
#: (``traceparent``, ``tracestate``) of the code whose commit enqueued it.
TRACE_HEADER_PREFIX = "bsft_saga_"


# Both tasks are acknowledged only once they ran (acks_late), and a worker process that is
# killed while running one hands the message back to the broker (reject_on_worker_lost), so
# a SIGKILLed worker delays a delivery rather than losing it. Running either twice is safe:
# every row is claimed before it is delivered. A rerun within CLAIM_LEASE of a run that died
# holding claims leaves those rows; the drain delivers them once the lease has run out
# (docs/celery.md, "When a worker dies"; tests/processes/test_celery_faults.py).


@shared_task(
    name=DRAIN_TASK, bind=True, acks_late=True, reject_on_worker_lost=True, ignore_result=True
)
def drain_saga_timeouts(self: Task) -> dict[str, int]:
    """Drain due timers and due outbox rows, round after round, while there is work,
    for at most one ``POLL_INTERVAL`` (the next beat tick takes over from there).

    A round that loses its database connection (a failover) does not end the run: the
    connection is replaced and the next round first gives back what the lost one had
    claimed, so those timers fire in this run once the database answers again
    (``bsft_saga.draining.drain``, ``Until.POLL_INTERVAL``).

    The worker reports as a ``celery`` dispatcher, its pool children (prefork) on its row:
    its heartbeat shows in ``saga_status``, fresh while any of them passes. Called as a
    function or run eagerly (``apply()``, ``CELERY_TASK_ALWAYS_EAGER``), it is no worker's
    and reports nothing: the calling process would otherwise leave a heartbeat that goes
    stale as soon as it returns.
    """
    from bsft_saga.delivery.heartbeat import reporting
    from bsft_saga.draining import Until, drain
    from bsft_saga.models import DispatcherKind

    in_a_worker = not (self.request.called_directly or self.request.is_eager)
    with reporting(DispatcherKind.CELERY) if in_a_worker else contextlib.nullcontext():
        total = drain(Until.POLL_INTERVAL)
    timers, delivered = total.timers, total.outbox.delivered
    if timers.settled or timers.failed:
        logger.info("bsft_saga drain: %s delivered=%d", timers, delivered)
    return {**asdict(timers), "delivered": delivered}


@shared_task(
    name="bsft_saga.tasks.deliver_event",
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
)
def deliver_event(message_id: str) -> int:
    """Deliver one outbox row (a ``publish(..., defer=True)`` event); returns 1 if published.

    The delivery continues the trace whose commit enqueued it (the message's
    ``bsft_saga_traceparent`` header), unless a Celery instrumentation already made the
    task's own span current from the message.
    """
    from bsft_saga import outbox

    with telemetry.continued(_carried(current_task.request if current_task else None)):
        return outbox.deliver([uuid.UUID(message_id)]).delivered


def _carried(request: Any) -> dict[str, str]:
    # A worker sets a message's own headers on the request; an eager run keeps them apart.
    if request is None:
        return {}
    headers = request.headers or {}
    carried = {}
    for key in ("traceparent", "tracestate"):
        value = request.get(TRACE_HEADER_PREFIX + key) or headers.get(TRACE_HEADER_PREFIX + key)
        if value:
            carried[key] = value
    return carried


def _enqueue_delivery(sender: Any, *, message_id: uuid.UUID, **kwargs: Any) -> None:
    try:
        trace_context = telemetry.current_trace_context()
        if trace_context is None:
            deliver_event.delay(str(message_id))
        else:  # carried through the broker: the worker's delivery joins this trace
            headers = {TRACE_HEADER_PREFIX + key: value for key, value in trace_context.items()}
            deliver_event.apply_async((str(message_id),), headers=headers)
    except Exception:
        logger.exception("bsft_saga: could not enqueue delivery of %s; the drain will", message_id)


def _report_for_the_pool(**kwargs: Any) -> None:
    from bsft_saga.delivery.heartbeat import shared_with_forks
    from bsft_saga.models import DispatcherKind

    shared_with_forks(DispatcherKind.CELERY)


def _sign_off(**kwargs: Any) -> None:
    from bsft_saga.delivery.heartbeat import signed_off
    from bsft_saga.models import DispatcherKind

    signed_off(DispatcherKind.CELERY)


def connect_task_receivers() -> None:
    """Hand committed deferred events to a Celery worker, have a worker report as one
    dispatcher whatever pool child runs its drain, and remove its heartbeat when it stops
    cleanly (called from ``ready()``)."""
    deferred_event_committed.connect(_enqueue_delivery, dispatch_uid="bsft_saga.tasks.enqueue")
    # Sent in the worker's own process before it starts its pool: the children it forks
    # then report on its row. The beat hands each run to one child, often the same: an idle
    # child with a row of its own would go stale while the worker is healthy.
    worker_init.connect(_report_for_the_pool, dispatch_uid="bsft_saga.tasks.report_for_pool")
    # A pool child that exits (a warm shutdown, max-tasks-per-child) only forgets the
    # worker's row; the worker deletes it when it stops, after its pool: a heartbeat left
    # stale then means a worker that died.
    worker_process_shutdown.connect(_sign_off, dispatch_uid="bsft_saga.tasks.sign_off_child")
    worker_shutdown.connect(_sign_off, dispatch_uid="bsft_saga.tasks.sign_off_worker")


def beat_schedule() -> dict[str, Any]:
    """The current Celery app's beat schedule (empty without one): what the check
    ``bsft_saga.W002`` reads, here because no module but this one imports Celery."""
    return dict(current_app.conf.beat_schedule or {})


PURGE_TASK = "bsft_saga.tasks.purge_saga_data"


@shared_task(name=PURGE_TASK, ignore_result=True)
def purge_saga_data() -> dict[str, int]:
    """Delete what the ``RETENTION`` windows no longer keep (schedule it daily with beat).

    ``bsft_saga.retention.purge_saga_data()`` with every ``RETENTION`` default; returns the
    rows deleted per table. Bounded batches, so it runs beside live traffic.
    """
    from bsft_saga import retention

    report = retention.purge_saga_data()
    logger.info("bsft_saga purge: %s", report)
    return asdict(report)
