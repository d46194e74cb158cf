"""``manage.py requeue_saga_outbox``: make dead-lettered outbox messages deliverable again."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from bsft_saga.management import arguments
from bsft_saga.outbox import requeue_dead_lettered


class Command(BaseCommand):
    help = (
        "Requeue dead-lettered outbox messages (deferred and staged events): attempts are "
        "reset and the next drain delivers them again, with the same message id. Fix the "
        "cause first (a receiver that kept failing, a renamed event type). Ids that cannot "
        "be requeued are named, and the command then exits with an error."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument(
            "--all-dead-lettered",
            action="store_true",
            help="Requeue every dead-lettered outbox message.",
        )
        which.add_argument(
            "--id",
            dest="ids",
            nargs="+",
            action="extend",
            metavar="UUID",
            help="Requeue these outbox messages (their message ids); may be repeated.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        ids = None if options["all_dead_lettered"] else arguments.uuids("--id", options["ids"])
        result = requeue_dead_lettered(ids)
        verbose = int(options["verbosity"]) >= 1
        if verbose:
            for pk, reason in result.refused:
                self.stderr.write(self.style.WARNING(f"refused {pk}: {reason}"))
            self.stdout.write(
                self.style.SUCCESS(f"Requeued {result.requeued} dead-lettered outbox message(s).")
            )
        if result.refused:
            refused = ", ".join(str(pk) for pk, _reason in result.refused)
            raise CommandError(f"{len(result.refused)} outbox message(s) not requeued: {refused}")
