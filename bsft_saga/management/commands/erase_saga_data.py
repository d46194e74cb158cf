"""``manage.py erase_saga_data``: forget every instance of one saga type's correlation key."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from bsft_saga.management import arguments
from bsft_saga.management.printable import printable
from bsft_saga.management.progress import progress_line
from bsft_saga.models import SagaInstance
from bsft_saga.retention import erase_saga_data

_MAX_LENGTHS = {
    "SAGA_TYPE": SagaInstance._meta.get_field("saga_type").max_length,
    "KEY": SagaInstance._meta.get_field("correlation_key").max_length,
}


class Command(BaseCommand):
    help = (
        "Erase saga data of one correlation key (an erasure request): every completed "
        "instance of SAGA_TYPE for KEY, with its inbox rows, timers and outbox rows, "
        "pending ones included. The active instance too with --include-active (its "
        "pending timers are canceled first). Each erased instance gets one audit record "
        "'saga.instance.erased'. The last line is instances=N."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("saga_type", metavar="SAGA_TYPE", help="The flow's saga_type.")
        parser.add_argument(
            "key", metavar="KEY", help="The correlation key ('' for a single-instance flow)."
        )
        parser.add_argument(
            "--include-active",
            action="store_true",
            help="Also erase the active instance of the key, canceling its pending timers.",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Only count the instances that would be erased; write no audit record.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        saga_type = arguments.text(
            "SAGA_TYPE", options["saga_type"], max_length=_MAX_LENGTHS["SAGA_TYPE"]
        )
        key = arguments.text("KEY", options["key"], max_length=_MAX_LENGTHS["KEY"])
        with progress_line(self, options, "instances") as progress:
            report = erase_saga_data(
                saga_type,
                key,
                include_active=options["include_active"],
                dry_run=options["dry_run"],
                progress=progress,
            )
        if int(options["verbosity"]) >= 1:
            saga_type, key = printable(saga_type), printable(key)  # printed from here on
            for pk in report.kept_active:
                self.stderr.write(
                    self.style.WARNING(
                        f"kept active instance {pk} of {saga_type}[{key}]: "
                        "pass --include-active to erase it too"
                    )
                )
            rows = report.rows
            if options["dry_run"]:
                self.stdout.write(
                    f"Would erase {report.instances} instance(s) of {saga_type}[{key}]."
                )
            else:
                self.stdout.write(
                    f"Erased {report.instances} instance(s) of {saga_type}[{key}] "
                    f"(inbox={rows.inbox} journal={rows.journal} timeouts={rows.timeouts} "
                    f"outbox={rows.outbox})."
                )
        # Last, at every verbosity: scripts read it with `tail -n 1`.
        self.stdout.write(self.style.SUCCESS(f"instances={report.instances}"))
