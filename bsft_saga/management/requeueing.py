"""What ``requeue_saga_timeouts`` and ``requeue_saga_outbox`` share: one way to requeue."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

from django.core.management.base import BaseCommand, CommandError, CommandParser

from bsft_saga.delivery.requeue import RequeueReport
from bsft_saga.management.printable import printable
from bsft_saga.management.progress import progress_line
from bsft_saga.progress import Progress


class RequeueCommand(BaseCommand):
    """Requeue the dead letters of one table: ``--all-dead-lettered`` or ``--id ...``.

    Every id that can be requeued is; each refused one is named on stderr with its reason,
    and the command then fails with a ``CommandError`` listing them, so a script notices.
    On a terminal a progress line shows how far it is (:mod:`~bsft_saga.management.progress`).
    """

    #: What a row is called ("timer", "outbox message") and how its ids are written.
    noun: ClassVar[str]
    id_metavar: ClassVar[str]
    id_help: ClassVar[str]

    def parse_ids(self, values: Iterable[Any]) -> list[Any]:
        raise NotImplementedError

    def requeue(self, ids: list[Any] | None, progress: Progress | None) -> RequeueReport:
        """Requeue these ids (``None``: every dead letter of the table), telling ``progress``."""
        raise NotImplementedError

    def add_arguments(self, parser: CommandParser) -> None:
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument(
            "--all-dead-lettered",
            action="store_true",
            help=f"Requeue every dead-lettered {self.noun}.",
        )
        which.add_argument(
            "--id",
            dest="ids",
            nargs="+",
            action="extend",
            metavar=self.id_metavar,
            help=self.id_help,
        )

    def handle(self, *args: Any, **options: Any) -> None:
        ids = None if options["all_dead_lettered"] else self.parse_ids(options["ids"])
        with progress_line(self, options, f"dead-lettered {self.noun}s") as progress:
            result = self.requeue(ids, progress)
        if int(options["verbosity"]) >= 1:
            for pk, reason in result.refused:
                self.stderr.write(self.style.WARNING(f"refused {pk}: {printable(reason)}"))
            self.stdout.write(
                self.style.SUCCESS(f"Requeued {result.requeued} dead-lettered {self.noun}(s).")
            )
        if result.refused:
            refused = ", ".join(str(pk) for pk, _reason in result.refused)
            raise CommandError(f"{len(result.refused)} {self.noun}(s) not requeued: {refused}")
