"""``manage.py saga_status``: are timers firing? Counts, dead letters, the lag and the
dispatchers' heartbeats, for people (text), scripts (JSON) and health probes (``--max-lag``,
``--max-idle``)."""

from __future__ import annotations

import json
import math
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from bsft_saga.dispatchers import DispatcherStatus
from bsft_saga.management.printable import printable
from bsft_saga.status import SagaStatus, saga_status


class Command(BaseCommand):
    help = (
        "Print how many saga instances are active, how many timers are pending, due and "
        "dead-lettered, how many outbox rows wait or were dead-lettered, and lag_seconds: how "
        "late the oldest due timer or due outbox row is; then the dispatchers that "
        "report in (drain_saga_timeouts --loop, Celery workers) and idle_seconds, how long ago "
        "the newest of them passed. With --max-lag SECONDS the command exits with status 1 "
        "when the lag is greater, with --max-idle SECONDS when idle_seconds is (or no "
        "dispatcher reports): a health probe or cron alert."
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
        parser.add_argument(
            "--max-idle",
            type=float,
            default=None,
            metavar="SECONDS",
            help="Fail (exit status 1) when idle_seconds is strictly greater than this, or "
            "null (no dispatcher reports): nothing has run a pass for that long, even if "
            "nothing was due. The numbers are printed either way.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        max_lag = _seconds(options["max_lag"], "--max-lag")
        max_idle = _seconds(options["max_idle"], "--max-idle")
        status = saga_status()
        if options["format"] == "json":
            self.stdout.write(json.dumps(status.as_dict(), indent=2))
        else:
            self.stdout.write(_as_text(status))
            if status.idle_warning:
                self.stdout.write(self.style.WARNING(status.idle_warning))
        if max_lag is not None and status.lag_seconds > max_lag:
            raise CommandError(
                f"lag_seconds={status.lag_seconds:.3f} is above --max-lag {max_lag:g}: due "
                "timers or outbox rows are not being drained (is a drain_saga_timeouts --loop "
                "process or the Celery beat entry running?)"
            )
        idle = status.idle_seconds
        if max_idle is not None and (idle is None or idle > max_idle):
            problem = (
                "idle_seconds=null: no dispatcher reports"
                if idle is None
                else f"idle_seconds={idle:.3f} is above --max-idle {max_idle:g}: no dispatcher "
                "has run a pass since"
            )
            raise CommandError(
                f"{problem} (is a drain_saga_timeouts --loop process, or a Celery worker with "
                "the beat entry, running?)"
            )


def _seconds(value: float | None, option: str) -> float | None:
    if value is not None and not (math.isfinite(value) and value >= 0):
        raise CommandError(f"{option} must be a number of seconds >= 0, got {value}")
    return value


def _as_text(status: SagaStatus) -> str:
    """One ``key value`` line per number, then one line per dispatcher."""
    values = {
        key: value
        for key, value in status.as_dict().items()
        if key not in ("dispatchers", "idle_warning")
    }
    width = max(len(key) for key in values)
    lines = [f"{key:<{width}}  {_number(value)}" for key, value in values.items()]
    lines.append(f"{'dispatchers':<{width}}  {len(status.dispatchers)}")
    lines += [f"  {_dispatcher_line(dispatcher)}" for dispatcher in status.dispatchers]
    return "\n".join(lines)


def _number(value: Any) -> str:
    if value is None:
        return "none"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _dispatcher_line(dispatcher: DispatcherStatus) -> str:
    when = (
        f"{dispatcher.idle_seconds:.0f} s ago"
        if dispatcher.ahead_seconds is None
        else f"{dispatcher.ahead_seconds:.0f} s ahead of this clock"
    )
    line = (
        f"{printable(dispatcher.kind)} {printable(dispatcher.host)}:{dispatcher.pid}  last pass "
        f"{when}  delivered={dispatcher.delivered} claims={dispatcher.claims}"
    )
    return f"{line}  stale" if dispatcher.stale else line
