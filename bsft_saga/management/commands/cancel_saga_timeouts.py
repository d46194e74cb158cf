"""``manage.py cancel_saga_timeouts``: cancel pending timers by id."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from bsft_saga.management import arguments
from bsft_saga.management.printable import printable
from bsft_saga.timeouts.edits import cancel_timers


class Command(BaseCommand):
    help = (
        "Cancel pending timers that no dispatcher holds: each is retired as 'canceled', "
        "unpublished, with an audit record 'saga.timeout.canceled'. Timers that do not exist, "
        "are no longer pending, are held by a dispatcher's claim or are a saga's deadline "
        "(bsft_saga.deadline: reschedule it with reschedule_saga_timeout, or terminate the "
        "saga) are refused: the others are canceled, the refused ones are named, and the "
        "command then fails (exit status 1)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("ids", nargs="+", metavar="ID", help="SagaTimeout ids to cancel.")

    def handle(self, *args: Any, **options: Any) -> None:
        ids = arguments.row_ids("ID", options["ids"])
        report = cancel_timers(ids, user=None)
        if int(options["verbosity"]) >= 1:
            self.stdout.write(self.style.SUCCESS(f"Canceled {len(report.canceled)} timer(s)."))
        for pk, why in report.refused:
            self.stderr.write(self.style.WARNING(f"refused {pk}: {printable(why)}"))
        if report.refused:
            refused = " ".join(str(pk) for pk, _ in report.refused)
            raise CommandError(f"{len(report.refused)} timer(s) not canceled: {refused}")
