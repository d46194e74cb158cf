"""``manage.py purge_saga_timeouts``: delete timer rows retired longer ago than a window.

The timers-only subset of ``purge_saga_data``.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from bsft_saga import clock
from bsft_saga.management import arguments
from bsft_saga.management.arguments import parse_duration
from bsft_saga.retention import WindowError, purge_timeouts

__all__ = ["Command", "parse_duration"]  # parse_duration: importable here as before


class Command(BaseCommand):
    help = (
        "Delete saga timer rows that left the pending set (fired, missed, canceled or "
        "dead-lettered) longer ago than --older-than. Pending timers are never touched. "
        "The timers-only part of purge_saga_data, which also purges finished instances, "
        "their inbox rows and outbox rows: schedule that one."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--older-than",
            required=True,
            metavar="DURATION",
            help="Retention window: rows whose dispatched_at is older than now minus this are "
            "deleted. A whole number with one unit: 45s, 90m, 12h, 30d, 2w (at most "
            f"{arguments.MAX_DURATION.days}d).",
        )
        parser.add_argument(
            "--keep-dead-lettered",
            action="store_true",
            help="Keep dead-lettered rows, whatever their age: somebody still has to look at them.",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Only count the rows that would be deleted.",
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            default=1000,
            metavar="N",
            help=f"Rows deleted per statement (default 1000, at most {arguments.MAX_BATCH_SIZE}).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        older_than = arguments.duration("--older-than", options["older_than"])
        batch_size = arguments.batch_size("--batch-size", options["batch_size"])
        now = clock.now()
        try:
            count = purge_timeouts(
                older_than,
                keep_dead_lettered=options["keep_dead_lettered"],
                dry_run=options["dry_run"],
                batch_size=batch_size,
                now=now,
            )
        except WindowError as exc:
            raise CommandError(f"--older-than {exc.problem}") from None
        if int(options["verbosity"]) < 1:
            return
        cutoff = f"{now - older_than:%Y-%m-%d %H:%M:%S} UTC"
        kept = " (dead-lettered rows kept)" if options["keep_dead_lettered"] else ""
        if options["dry_run"]:
            message = f"Would delete {count} saga timer rows retired before {cutoff}{kept}."
        else:
            message = f"Deleted {count} saga timer rows retired before {cutoff}{kept}."
        self.stdout.write(self.style.SUCCESS(message))
