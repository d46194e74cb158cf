"""``manage.py purge_saga_data``: delete what the retention windows no longer keep."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from bsft_saga import clock
from bsft_saga.management import arguments
from bsft_saga.management.progress import progress_line
from bsft_saga.retention import (
    DEFAULT_BATCH_SIZE,
    FROM_SETTINGS,
    RetentionPolicy,
    WindowError,
    apply_policy,
    minimum_safe_window,
)


class Command(BaseCommand):
    help = (
        "Delete saga data older than the retention windows, in bounded batches: completed "
        "instances with their inbox rows, timers and outbox rows; retired timers; delivered "
        "and dead-lettered outbox rows; audit records (with an audit window); heartbeats of "
        "dispatchers that have not passed for a day. Active "
        "instances and their inbox rows, pending timers and pending outbox rows are "
        "never deleted. Each option defaults to BSFT_SAGA['RETENTION']. On a terminal a "
        "progress line shows the rows deleted so far, the rate and what remains. The last line is "
        "instances=N inbox=N journal=N timeouts=N outbox=N audit=N dispatchers=N."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--older-than",
            metavar="DURATION",
            help="Retention window (default RETENTION['OLDER_THAN']): finished instances, "
            "retired timers and settled outbox rows older than now minus this are deleted. "
            "A whole number with one unit: 45s, 90m, 12h, 30d, 2w.",
        )
        # Two destinations, so that call_command(keep_dead_lettered=False) and
        # call_command(no_keep_dead_lettered=True) both mean what they say.
        keep = parser.add_mutually_exclusive_group()
        keep.add_argument(
            "--keep-dead-lettered",
            action="store_true",
            default=None,
            help="Keep every dead-lettered timer and outbox row whatever its age, with the "
            "completed instance it belongs to (default RETENTION['KEEP_DEAD_LETTERED']).",
        )
        keep.add_argument(
            "--no-keep-dead-lettered",
            action="store_true",
            help="Purge dead letters older than the window like any other retired row.",
        )
        parser.add_argument(
            "--audit-older-than",
            metavar="DURATION",
            help="Delete audit records (ModelAuditRecorder) older than this (default "
            "RETENTION['AUDIT_OLDER_THAN']; without either, every audit record is kept).",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Only count what would be deleted.",
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            default=DEFAULT_BATCH_SIZE,
            metavar="N",
            help=f"Rows deleted per statement (default {DEFAULT_BATCH_SIZE}).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        audit_older_than = _window(options["audit_older_than"], "--audit-older-than")
        batch_size = arguments.batch_size("--batch-size", options["batch_size"])
        now = clock.now()
        try:
            policy = RetentionPolicy.build(
                older_than=_window(options["older_than"], "--older-than"),
                keep_dead_lettered=_keep_dead_lettered(options),
                audit_older_than=FROM_SETTINGS if audit_older_than is None else audit_older_than,
                now=now,
            )
        except WindowError as exc:
            raise CommandError(f"--{exc.argument.replace('_', '-')} {exc.problem}") from None
        with progress_line(self, options, "rows deleted") as progress:
            report = apply_policy(
                policy, dry_run=options["dry_run"], batch_size=batch_size, progress=progress
            )
        if int(options["verbosity"]) >= 1:
            self._warn_if_short(now - policy.cutoff)
            self.stdout.write(_describe(policy, dry_run=options["dry_run"]))
        # Last, at every verbosity: scripts read it with `tail -n 1`.
        self.stdout.write(self.style.SUCCESS(str(report)))

    def _warn_if_short(self, window: timedelta) -> None:
        safe = minimum_safe_window()
        if window < safe:
            self.stderr.write(
                self.style.WARNING(
                    f"The retention window {window} is shorter than {safe} (the longer of "
                    "TIMEOUTS['MAX_CATCH_UP_AGE'] and a day): a start event redelivered after "
                    "its finished instance was purged starts the saga again."
                )
            )


def _keep_dead_lettered(options: dict[str, Any]) -> bool | None:
    """True, False, or None for "as RETENTION['KEEP_DEAD_LETTERED'] says"."""
    keep: bool | None = options["keep_dead_lettered"]
    if options["no_keep_dead_lettered"]:
        if keep:
            raise CommandError(
                "--keep-dead-lettered and --no-keep-dead-lettered exclude each other"
            )
        return False
    return keep


def _window(value: str | timedelta | None, option: str) -> timedelta | None:
    return None if value is None else arguments.duration(option, value)


def _describe(policy: RetentionPolicy, *, dry_run: bool) -> str:
    verb = "Would delete" if dry_run else "Deleted"
    kept = "dead letters kept" if policy.keep_dead_lettered else "dead letters purged too"
    audit = (
        "audit records kept"
        if policy.audit_cutoff is None
        else f"audit records before {_utc(policy.audit_cutoff)}"
    )
    return f"{verb} saga data before {_utc(policy.cutoff)} ({kept}; {audit}):"


def _utc(moment: datetime) -> str:
    return f"{moment:%Y-%m-%d %H:%M:%S} UTC"
