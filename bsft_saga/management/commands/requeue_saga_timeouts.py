"""``manage.py requeue_saga_timeouts``: return dead-lettered timers to the pending set."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from bsft_saga.delivery.requeue import RequeueReport
from bsft_saga.management import arguments
from bsft_saga.management.requeueing import RequeueCommand
from bsft_saga.progress import Progress
from bsft_saga.timeouts.maintenance import requeue_dead_lettered


class Command(RequeueCommand):
    help = (
        "Requeue dead-lettered saga timers: they become pending again with attempts reset, "
        "and fire at the next drain. Fix the cause first (e.g. restore the renamed event "
        "type). The ids that cannot be requeued are named with the reason (a completed saga, "
        "a wait that has ended, a pending timer of the same name), the others are requeued, "
        "and the command then exits with an error."
    )
    noun = "timer"
    id_metavar = "ID"
    id_help = "Requeue these timers (SagaTimeout ids); may be repeated."

    def parse_ids(self, values: Iterable[Any]) -> list[Any]:
        return arguments.row_ids("--id", values)

    def requeue(self, ids: list[Any] | None, progress: Progress | None) -> RequeueReport:
        return requeue_dead_lettered(ids, progress=progress)
