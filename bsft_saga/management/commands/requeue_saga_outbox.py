"""``manage.py requeue_saga_outbox``: make dead-lettered outbox messages deliverable again."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from bsft_saga.delivery.requeue import RequeueReport
from bsft_saga.management import arguments
from bsft_saga.management.requeueing import RequeueCommand
from bsft_saga.outbox import requeue_dead_lettered
from bsft_saga.progress import Progress


class Command(RequeueCommand):
    help = (
        "Requeue dead-lettered outbox messages (deferred and staged events): attempts are "
        "reset and the next drain delivers them again, with the same message id. Fix the "
        "cause first (a receiver that kept failing, a renamed event type). A message a step "
        "published before its saga completed is refused. Ids that cannot be requeued are "
        "named, and the command then exits with an error."
    )
    noun = "outbox message"
    id_metavar = "UUID"
    id_help = "Requeue these outbox messages (their message ids); may be repeated."

    def parse_ids(self, values: Iterable[Any]) -> list[Any]:
        return arguments.uuids("--id", values)

    def requeue(self, ids: list[Any] | None, progress: Progress | None) -> RequeueReport:
        return requeue_dead_lettered(ids, progress=progress)
