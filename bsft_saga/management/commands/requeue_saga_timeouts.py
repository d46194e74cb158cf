"""``manage.py requeue_saga_timeouts``: return dead-lettered timers to the pending set."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from bsft_saga.management import arguments
from bsft_saga.timeouts.maintenance import requeue_dead_lettered


class Command(BaseCommand):
    help = (
        "Requeue dead-lettered saga timers: they become pending again with attempts reset, "
        "and fire at the next drain. Fix the cause first (e.g. restore the renamed event "
        "type). The ids that cannot be requeued are named with the reason (a completed saga, "
        "a wait that has ended, a pending timer of the same name), the others are requeued, "
        "and the command then exits with an error."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument(
            "--all-dead-lettered",
            action="store_true",
            help="Requeue every dead-lettered timer.",
        )
        which.add_argument(
            "--id",
            dest="ids",
            type=int,
            nargs="+",
            action="extend",
            metavar="ID",
            help="Requeue these timers (SagaTimeout ids); may be repeated.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        ids = None if options["all_dead_lettered"] else arguments.row_ids("--id", options["ids"])
        result = requeue_dead_lettered(ids)
        if int(options["verbosity"]) >= 1:
            for pk, reason in result.refused:
                self.stderr.write(self.style.WARNING(f"refused {pk}: {reason}"))
            self.stdout.write(
                self.style.SUCCESS(f"Requeued {result.requeued} dead-lettered timer(s).")
            )
        if result.refused:
            refused = ", ".join(str(pk) for pk, _reason in result.refused)
            raise CommandError(f"{len(result.refused)} timer(s) not requeued: {refused}")
