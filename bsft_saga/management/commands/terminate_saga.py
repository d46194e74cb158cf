"""``manage.py terminate_saga``: complete saga instances that went wrong, now, with a reason."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from bsft_saga.engine.termination import terminate
from bsft_saga.management import arguments
from bsft_saga.management.keys import nothing_found
from bsft_saga.management.printable import printable
from bsft_saga.models import SagaInstance


class Command(BaseCommand):
    help = (
        "Terminate active saga instances: each is completed at once (no step runs), its "
        "pending timers are canceled, the reason is stored on SagaInstance.terminated_reason "
        "and an audit record 'saga.instance.terminated' is written. Instances that are "
        "already complete or do not exist are refused: the others are terminated, the "
        "refused ones are named, and the command then fails (exit status 1). Name the "
        "instances by id, or one by its flow and key (--flow SAGA_TYPE --key KEY)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "ids", nargs="*", metavar="ID", help="SagaInstance ids (UUIDs) to terminate."
        )
        parser.add_argument(
            "--flow",
            metavar="SAGA_TYPE",
            help="With --key: terminate that key's active instance of this saga type.",
        )
        parser.add_argument("--key", metavar="KEY", help="The correlation key, with --flow.")
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
        flow, key = options["flow"], options["key"]
        if (flow is None) != (key is None):
            raise CommandError("--flow and --key go together: the saga type and its key")
        if flow is not None and ids:
            raise CommandError("name the instances by ID or by --flow and --key, not both")
        if flow is None and not ids:
            raise CommandError("name the instances to terminate: IDs, or --flow and --key")
        if flow is not None:
            ids = [
                self._active_instance(arguments.text("--flow", flow), arguments.text("--key", key))
            ]
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
            self.stderr.write(self.style.WARNING(f"refused {printable(given)}: {printable(why)}"))
        if result.refused:
            refused = " ".join(printable(given) for given, _ in result.refused)
            raise CommandError(f"{len(result.refused)} instance(s) not terminated: {refused}")

    @staticmethod
    def _active_instance(saga_type: str, key: str) -> str:
        pk = (
            SagaInstance.objects.active()
            .for_key(saga_type, key)
            .values_list("pk", flat=True)
            .first()
        )
        if pk is None:
            raise CommandError(nothing_found(saga_type, key, active=True))
        return str(pk)
