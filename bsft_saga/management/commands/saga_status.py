"""``manage.py saga_status``: are timers firing? Counts, dead letters and the lag, for
people (text), scripts (JSON) and health probes (``--max-lag``)."""

from __future__ import annotations

import json
import math
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from bsft_saga.status import SagaStatus, saga_status


class Command(BaseCommand):
    help = (
        "Print how many saga instances are active, how many timers are pending, due and "
        "dead-lettered, how many outbox rows wait or were dead-lettered, and lag_seconds: how "
        "late the oldest due timer or undelivered outbox row is. With --max-lag SECONDS the "
        "command exits with status 1 when the lag is greater (a health probe or cron alert)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--format",
            choices=("text", "json"),
            default="text",
            help="text (default): one 'key value' line per number; json: one JSON object with "
            "the keys of GET status/.",
        )
        parser.add_argument(
            "--max-lag",
            type=float,
            default=None,
            metavar="SECONDS",
            help="Fail (exit status 1) when lag_seconds is strictly greater than this; the "
            "numbers are printed either way.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        max_lag = options["max_lag"]
        if max_lag is not None and not (math.isfinite(max_lag) and max_lag >= 0):
            raise CommandError(f"--max-lag must be a number of seconds >= 0, got {max_lag}")
        status = saga_status()
        if options["format"] == "json":
            self.stdout.write(json.dumps(status.as_dict(), indent=2))
        else:
            self.stdout.write(_as_text(status))
        if max_lag is not None and status.lag_seconds > max_lag:
            raise CommandError(
                f"lag_seconds={status.lag_seconds:.3f} is above --max-lag {max_lag:g}: due "
                "timers or outbox rows are not being drained (is a drain_saga_timeouts --loop "
                "process or the Celery beat entry running?)"
            )


def _as_text(status: SagaStatus) -> str:
    values = status.as_dict()
    width = max(len(key) for key in values)
    return "\n".join(
        f"{key:<{width}}  {value:.3f}" if isinstance(value, float) else f"{key:<{width}}  {value}"
        for key, value in values.items()
    )
