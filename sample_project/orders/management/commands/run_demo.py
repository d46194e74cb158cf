"""``manage.py run_demo``: the sample shop's sagas through one scripted week.

The clock is a ``SagaHarness`` (frozen, moved only by the script), and every timer fires
through the real dispatcher (``drain_due``) at its own due time. Nothing is sent to a
Celery broker: no event is published with ``defer=True``, so the demo needs no Redis.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from django.core.management.base import BaseCommand, CommandError

from bsft_saga import clock
from bsft_saga.models import JournalVia, SagaInstance, SagaJournalEntry, SagaTimeout
from bsft_saga.status import SagaStatus, saga_status
from bsft_saga.tasks import drain_saga_timeouts
from bsft_saga.testing import SagaHarness
from sample_project.orders.events import (
    OrderPlaced,
    OrderShipped,
    PaymentReceived,
    QuoteAccepted,
    QuoteSent,
)
from sample_project.orders.models import Reminder

#: A Friday. Berlin switches to summer time on Sunday 2026-03-29, so the quotes' reminders,
#: counted in Berlin business days, keep 11:00 local time and move from 10:00 to 09:00 UTC.
START = datetime(2026, 3, 27, 10, 0, tzinfo=UTC)
BERLIN = ZoneInfo("Europe/Berlin")
RECEIVERS_LOGGER = "sample_project.orders.receivers"


@dataclass(frozen=True)
class Act:
    """One line of the script: at ``at``, ``what`` happens (publishing ``event``, if any)."""

    at: datetime
    what: str
    event: Any = None


SCRIPT = [
    Act(START, "Acme GmbH is sent quote q-1", QuoteSent("q-1", customer="Acme GmbH")),
    Act(START, "Brandt KG is sent quote q-2", QuoteSent("q-2", customer="Brandt KG")),
    Act(START, "order o-1 is placed", OrderPlaced("o-1", total=Decimal("149.90"))),
    Act(START, "order o-2 is placed", OrderPlaced("o-2", total=Decimal("25.00"))),
    Act(
        START + timedelta(hours=2),
        "o-1 is paid",
        PaymentReceived("o-1", amount=Decimal("149.90")),
    ),
    Act(START + timedelta(hours=6), "o-1 is shipped", OrderShipped("o-1")),
    Act(START + timedelta(days=1, hours=2), "nobody pays for o-2"),
    Act(START + timedelta(days=2, hours=23), "Brandt KG accepts quote q-2", QuoteAccepted("q-2")),
    Act(START + timedelta(days=4, hours=2), "q-1 is still unanswered"),
    Act(START + timedelta(days=5, hours=2), "q-1 is still unanswered"),
    Act(START + timedelta(days=6), "Acme GmbH accepts quote q-1", QuoteAccepted("q-1")),
]


def utc(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%a %Y-%m-%d %H:%M UTC")


def berlin(moment: datetime) -> str:
    return moment.astimezone(BERLIN).strftime("%H:%M %Z in Berlin")


def label(instance: SagaInstance) -> str:
    return f"{instance.saga_type}[{instance.correlation_key}]"


@dataclass(frozen=True)
class Snapshot:
    """What the database held before an act, to print what the act changed."""

    instances: dict[Any, tuple[int, bool]]
    pending_timers: set[int]

    @classmethod
    def take(cls) -> Snapshot:
        return cls(
            instances={
                pk: (step, done)
                for pk, step, done in SagaInstance.objects.values_list(
                    "pk", "step_index", "is_complete"
                )
            },
            pending_timers=set(SagaTimeout.objects.pending().values_list("pk", flat=True)),
        )


class _Narrator(logging.Handler):
    """Collects the receivers' log lines, stamped with the (frozen) saga clock."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[tuple[datetime, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((clock.now(), record.getMessage()))


class Command(BaseCommand):
    help = (
        "Run the sample project's sagas through a scripted week on a frozen clock and print "
        "each saga's journey. Needs an empty, migrated database; no Celery broker."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        if SagaInstance.objects.exists():
            raise CommandError(
                "run_demo needs a database without sagas; `make demo` starts from a fresh "
                "SQLite file (sample_project/demo.sqlite3)."
            )
        verbose = options["verbosity"] >= 1
        narrator = _Narrator()
        logger = logging.getLogger(RECEIVERS_LOGGER)
        previous_level = logger.level
        logger.addHandler(narrator)
        logger.setLevel(logging.INFO)
        try:
            with SagaHarness(start=START) as harness:
                if verbose:
                    self._intro()
                for act in SCRIPT:
                    self._play(harness, act, narrator, verbose)
                # One more beat tick, exactly what Celery beat runs every POLL_INTERVAL.
                last_tick = drain_saga_timeouts()
                status = saga_status()
        finally:
            logger.removeHandler(narrator)
            logger.setLevel(previous_level)
        if verbose:
            self._journeys()
        self._summary(last_tick, status)

    # -- the story ------------------------------------------------------------------------

    def _intro(self) -> None:
        self.stdout.write(self.style.MIGRATE_HEADING("bsft_saga demo: a week of the sample shop"))
        self.stdout.write(
            f"The clock starts {utc(START)} ({berlin(START)}) and moves only when the script "
            "says so;\ntimers fire through the real dispatcher at their due time. Berlin "
            "switches to summer time on Sunday.\n"
        )

    def _play(self, harness: SagaHarness, act: Act, narrator: _Narrator, verbose: bool) -> None:
        if act.at > harness.now:
            before = Snapshot.take()
            if verbose and act.event is None:
                self.stdout.write(f"{utc(harness.now)}  .. until {utc(act.at)}: {act.what}")
            harness.advance_time(act.at - harness.now)
            self._changes(before, narrator, verbose)
        if act.event is not None:
            before = Snapshot.take()
            if verbose:
                self.stdout.write(f"{utc(harness.now)}  >> {act.what}: publish({act.event!r})")
            harness.publish(act.event)
            self._changes(before, narrator, verbose)

    def _changes(self, before: Snapshot, narrator: _Narrator, verbose: bool) -> None:
        """Print, in time order, what the last act did: timers, receivers, sagas."""
        lines: list[tuple[datetime, int, str]] = []
        settled = SagaTimeout.objects.filter(
            pk__in=before.pending_timers, dispatched_at__isnull=False
        )
        for timer in settled.select_related("saga"):
            lines.append(
                (
                    timer.dispatched_at or timer.due_at,
                    0,
                    f"timer {timer.name!r} of {label(timer.saga)} {timer.outcome}",
                )
            )
        lines += [(moment, 1, text) for moment, text in narrator.lines]
        narrator.lines.clear()
        for instance in SagaInstance.objects.order_by("created_at", "saga_type", "correlation_key"):
            was = before.instances.get(instance.pk)
            now = (instance.step_index, instance.is_complete)
            if was == now:
                continue
            move = "started" if was is None else f"step {was[0]} ->"
            status = "complete" if instance.is_complete else "waiting"
            lines.append(
                (
                    instance.updated_at,
                    2,
                    f"{label(instance)} {move} step {instance.step_index}, {status}  "
                    f"{json.dumps(instance.state)}",
                )
            )
        scheduled = SagaTimeout.objects.pending().exclude(pk__in=before.pending_timers)
        for timer in scheduled.select_related("saga"):
            lines.append(
                (
                    timer.scheduled_at,
                    3,
                    f"+ timer {timer.name!r} of {label(timer.saga)} due {utc(timer.due_at)} "
                    f"({berlin(timer.due_at)})",
                )
            )
        if verbose:
            for moment, _, text in sorted(lines, key=lambda line: (line[0], line[1])):
                self.stdout.write(f"{utc(moment)}     {text}")

    # -- the record -----------------------------------------------------------------------

    def _journeys(self) -> None:
        self.stdout.write("")
        self.stdout.write(
            self.style.MIGRATE_HEADING(
                "Journeys (SagaInstance, SagaJournalEntry and SagaTimeout rows; "
                "manage.py saga_history shows one)"
            )
        )
        for instance in SagaInstance.objects.order_by("saga_type", "correlation_key"):
            self.stdout.write(
                f"{instance.saga_type} [{instance.correlation_key}]  "
                f"step_index={instance.step_index}  is_complete={instance.is_complete}"
            )
            self.stdout.write(f"    state     {json.dumps(instance.state)}")
            for entry in SagaJournalEntry.objects.filter(saga=instance).order_by("at", "id"):
                what = entry.timer_name if entry.via == JournalVia.TIMER else entry.event_type
                if entry.step_after is None:
                    steps = "woke no step"
                else:
                    before = "-" if entry.step_before is None else entry.step_before
                    steps = f"step {before} -> {entry.step_after}"
                self.stdout.write(
                    f"    journal   {utc(entry.at)}  {entry.kind:<11} via {entry.via:<7} "
                    f"{what}  {steps}"
                )
            timers = SagaTimeout.objects.filter(saga=instance).order_by("due_at", "id")
            for timer in timers:
                settled = utc(timer.dispatched_at) if timer.dispatched_at else "-"
                self.stdout.write(
                    f"    timer     {timer.name:<9} due {utc(timer.due_at)} "
                    f"({berlin(timer.due_at)})  {timer.outcome or 'pending':<9} at {settled}"
                )
        self.stdout.write("")
        for reminder in Reminder.objects.all():
            self.stdout.write(
                f"reminder  {Reminder.Kind(reminder.kind).label:<16} quote {reminder.quote_id}  "
                f"sent {utc(reminder.sent_at)}"
            )

    def _summary(self, last_tick: dict[str, int], status: SagaStatus) -> None:
        instances = SagaInstance.objects.all()
        timers = SagaTimeout.objects.all()
        done = instances.filter(is_complete=True).count()
        outcomes = {
            outcome: timers.filter(outcome=outcome).count()
            for outcome in ("fired", "canceled", "missed", "dead_lettered")
        }
        self.stdout.write("")
        self.stdout.write(
            self.style.SUCCESS(
                f"{instances.count()} sagas ({done} complete, {instances.count() - done} active); "
                f"{timers.count()} timers: {outcomes['fired']} fired, "
                f"{outcomes['canceled']} canceled, {outcomes['missed']} missed, "
                f"{outcomes['dead_lettered']} dead-lettered, "
                f"{timers.filter(dispatched_at__isnull=True).count()} pending; "
                f"{Reminder.objects.count()} reminders sent."
            )
        )
        report = " ".join(
            f"{key}={last_tick[key]}"
            for key in ("fired", "missed", "failed", "dead_lettered", "unclaimed")
        )
        self.stdout.write(
            f"manage.py saga_status: {status.active_instances} active sagas, "
            f"{status.timeouts_pending} pending timers, {status.timeouts_due} due, "
            f"{status.dead_letters} dead letters, lag_seconds={status.lag_seconds:g}."
        )
        self.stdout.write(
            "Nothing was left for the next beat tick: every timer above fired at its due time "
            "or was canceled by its saga. That tick (bsft_saga.tasks.drain_saga_timeouts, "
            f"which Celery beat runs every POLL_INTERVAL) reports {report} "
            f"delivered={last_tick['delivered']}"
        )
