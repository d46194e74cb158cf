"""``manage.py reschedule_saga_timeout``: move one pending timer to another due time."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from bsft_saga.management import arguments
from bsft_saga.management.printable import printable
from bsft_saga.moments import format_moment
from bsft_saga.timeouts.edits import reschedule_timer


class Command(BaseCommand):
    help = (
        "Move a pending timer that no dispatcher holds to a new due time (ISO 8601; naive "
        "means TIME_ZONE), with an audit record 'saga.timeout.rescheduled'. Its payload, "
        "attempts and message id stay. A saga's deadline timer (bsft_saga.deadline) moves "
        "the saga's deadline with it. A timer that does not exist, is no longer pending or "
        "is held by a dispatcher's claim is refused (exit status 1)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("id", metavar="ID", help="The SagaTimeout id.")
        parser.add_argument("--to", required=True, metavar="ISO-DATETIME", help="The new due time.")

    def handle(self, *args: Any, **options: Any) -> None:
        [pk] = arguments.row_ids("ID", [options["id"]])
        due_at = arguments.moment("--to", options["to"])
        report = reschedule_timer(pk, due_at, user=None)
        if report.refused is not None:
            raise CommandError(f"refused {pk}: {printable(report.refused)}")
        if int(options["verbosity"]) >= 1 and report.due_at is not None:
            when = format_moment(report.due_at)
            moved = "; the saga's deadline moved with it" if report.deadline_moved else ""
            self.stdout.write(self.style.SUCCESS(f"Timer {pk} is due at {when}{moved}."))
