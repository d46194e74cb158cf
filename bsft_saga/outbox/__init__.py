"""The outbox: events staged inside a transaction and published after it commits.

Rows come from a step's ``ctx.publish`` and from ``publish(..., defer=True)``. Delivery is
at least once: right after commit, and again by ``deliver_pending`` (run by the drain task
and command) for rows whose delivery was lost with its process or failed. A delayed message
(a row with ``deliver_at``) is left to ``deliver_pending``, which claims no row before its
``deliver_at``: nothing hands it over at commit. Rows go through
the same passes as timers (:mod:`bsft_saga.delivery`): claimed with a lease, their
receivers run with no transaction open, their stamps and the steps they woke committed in
groups, retried with back-off, dead-lettered at ``MAX_DISPATCH_ATTEMPTS`` and requeued by
``requeue_saga_outbox``.

The package's modules: ``channel`` (:class:`OutboxChannel`, what is particular to outbox
rows), ``rows`` (a row's values and the envelope it publishes), ``staging`` (writing rows
and handing them over after commit), ``passes`` (delivering them) and ``requeue``.
"""

from __future__ import annotations

from bsft_saga.delivery.report import DeliveryReport
from bsft_saga.outbox.channel import OUTBOX, OutboxChannel
from bsft_saga.outbox.passes import deliver, deliver_pending
from bsft_saga.outbox.requeue import requeue_dead_lettered
from bsft_saga.outbox.rows import envelope_of, row_values
from bsft_saga.outbox.staging import deliver_after_commit, stage_deferred

__all__ = [
    "OUTBOX",
    "DeliveryReport",
    "OutboxChannel",
    "deliver",
    "deliver_after_commit",
    "deliver_pending",
    "envelope_of",
    "requeue_dead_lettered",
    "row_values",
    "stage_deferred",
]
