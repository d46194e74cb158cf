"""``manage.py requeue_saga_kept_events``: make dead-lettered kept events pending again."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.core.management.base import CommandError, CommandParser

from bsft_saga.delivery.requeue import RequeueReport
from bsft_saga.kept import requeue_dead_lettered
from bsft_saga.management import arguments
from bsft_saga.management.requeueing import RequeueCommand
from bsft_saga.progress import Progress


class Command(RequeueCommand):
    help = (
        "Requeue dead-lettered kept events (keep_early): attempts are reset, and each is "
        "applied to its saga once the saga is at its step (by the next drain, if it is there "
        "already). Fix the cause first (a step body that kept failing, a renamed event "
        "type). A kept event of a saga that has completed is refused. Ids that cannot be "
        "requeued are named, and the command then exits with an error."
    )
    noun = "kept event"
    id_metavar = "ID"
    id_help = "Requeue these kept events (SagaKeptEvent ids); may be repeated."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("ids", nargs="*", metavar=self.id_metavar, help=self.id_help)
        parser.add_argument(
            "--all",
            "--all-dead-lettered",
            dest="all_dead_lettered",
            action="store_true",
            help="Requeue every dead-lettered kept event.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["all_dead_lettered"] == bool(options["ids"]):
            raise CommandError("name the kept events to requeue (their ids), or pass --all")
        super().handle(*args, **options)

    def parse_ids(self, values: Iterable[Any]) -> list[Any]:
        return arguments.row_ids("ID", values)

    def requeue(self, ids: list[Any] | None, progress: Progress | None) -> RequeueReport:
        return requeue_dead_lettered(ids, progress=progress)
