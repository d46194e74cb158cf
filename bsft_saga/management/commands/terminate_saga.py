"""``manage.py terminate_saga``: complete saga instances that went wrong, now, with a reason."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from bsft_saga.engine.termination import terminate
from bsft_saga.management import arguments


class Command(BaseCommand):
    help = (
        "Terminate active saga instances: each is completed at once (no step runs), its "
        "pending timers are canceled, the reason is stored on SagaInstance.terminated_reason "
        "and an audit record 'saga.instance.terminated' is written. Instances that are "
        "already complete or do not exist are refused: the others are terminated, the "
        "refused ones are named, and the command then fails (exit status 1)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "ids", nargs="+", metavar="ID", help="SagaInstance ids (UUIDs) to terminate."
        )
        parser.add_argument(
            "--reason",
            required=True,
            help="Why: stored on each instance and shown to the next person who looks at it.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        reason = arguments.text("--reason", options["reason"]).strip()
        if not reason:
            raise CommandError("--reason must say why the sagas are terminated; it is empty")
        # Printed back when refused: text a terminal cannot print must fail here, by name.
        ids = [arguments.text("ID", given) for given in options["ids"]]
        result = terminate(ids, reason=reason, user=None)
        verbosity = int(options["verbosity"])
        if verbosity >= 2:
            for pk in result.terminated:
                self.stdout.write(f"terminated {pk}")
        if verbosity >= 1:
            self.stdout.write(
                self.style.SUCCESS(f"Terminated {len(result.terminated)} saga instance(s).")
            )
        for given, why in result.refused:
            self.stderr.write(self.style.WARNING(f"refused {given}: {why}"))
        if result.refused:
            refused = " ".join(given for given, _ in result.refused)
            raise CommandError(f"{len(result.refused)} instance(s) not terminated: {refused}")
