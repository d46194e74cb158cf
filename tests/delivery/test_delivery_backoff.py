"""Failures heal: a failed timer or outbox row waits out a doubling back-off, and no pass of
any kind tries it before ``next_attempt_at``.

The measured bug this pins: a receiver failing for 300 ms used to dead-letter its timer
within one beat tick, because every pass retried it at once and the Celery task, the
command's ``--until-empty`` and ``--loop`` counted a failure as work.
"""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.test import override_settings
from django.utils import timezone
from freezegun.api import FrozenDateTimeFactory

from bsft_saga import publish
from bsft_saga.delivery.backoff import retry_delay
from bsft_saga.draining import drain_round
from bsft_saga.models import SagaOutboxMessage, SagaTimeout, TimeoutOutcome
from bsft_saga.outbox import deliver_pending
from bsft_saga.querysets import DeliveryStatus
from bsft_saga.tasks import drain_saga_timeouts
from bsft_saga.testing import SagaHarness
from bsft_saga.timeouts import drain_due
from tests.support import telemetry as telemetry_fixtures
from tests.support.timer_fixtures import T0
from tests.testapp.engine_events import Unrouted
from tests.testapp.events import QuoteFollowUpDue, QuoteSent
from tests.testapp.timer_flows import QuoteFlow, timers_of

pytestmark = pytest.mark.django_db


class GatewayHiccup(Exception):
    pass


def follow_up(key: str = "q-1") -> SagaTimeout:
    return next(row for row in timers_of(QuoteFlow, key) if row.name == "followup")


@pytest.fixture
def failing_mailer(clock: FrozenDateTimeFactory, record: Any) -> Any:
    """A quote whose follow-up is due now and whose mail receiver is down."""
    mailer = record(QuoteFollowUpDue)
    mailer.fail_with = GatewayHiccup("payment gateway: 503")
    publish(QuoteSent("q-1"))
    clock.move_to(T0 + timedelta(days=2))
    return mailer


def test_the_delay_doubles_from_retry_backoff_up_to_max_retry_delay() -> None:
    base, cap = timedelta(seconds=5), timedelta(seconds=60)
    for attempts, full in [(1, 5), (2, 10), (3, 20), (4, 40), (5, 60), (30, 60), (500, 60)]:
        for _ in range(20):
            delay = retry_delay(attempts, base=base, cap=cap).total_seconds()
            assert 0.8 * full <= delay <= full, (attempts, delay)


def test_the_delays_of_rows_that_failed_together_are_spread() -> None:
    delays = {retry_delay(1, base=timedelta(seconds=5), cap=timedelta(hours=1)) for _ in range(50)}
    assert len(delays) > 40


def test_a_failed_timer_waits_for_its_retry_between_08_and_1_times_the_backoff(
    failing_mailer: Any, clock: FrozenDateTimeFactory
) -> None:
    failed_at = T0 + timedelta(days=2)

    assert drain_due().failed == 1

    row = follow_up()
    assert (row.is_pending, row.attempts) == (True, 1)
    assert row.next_attempt_at is not None
    assert (
        failed_at + timedelta(seconds=4) <= row.next_attempt_at <= failed_at + timedelta(seconds=5)
    )
    assert row.status() == DeliveryStatus.RETRYING


@override_settings(
    BSFT_SAGA={"DELIVERY": {"RETRY_BACKOFF": timedelta(seconds=10), "MAX_RETRY_DELAY": 25}}
)
def test_each_failure_doubles_the_wait_until_max_retry_delay(
    failing_mailer: Any, clock: FrozenDateTimeFactory
) -> None:
    waits = []
    for _ in range(4):
        assert drain_due().failed == 1
        row = follow_up()
        assert row.next_attempt_at is not None
        waits.append((row.next_attempt_at - timezone.now()).total_seconds())
        clock.move_to(row.next_attempt_at)

    for wait, full in zip(waits, [10, 20, 25, 25], strict=True):
        assert 0.8 * full <= wait <= full


def test_no_pass_tries_a_timer_before_its_next_attempt(
    failing_mailer: Any, clock: FrozenDateTimeFactory
) -> None:
    drain_due()
    retry_at = follow_up().next_attempt_at
    assert retry_at is not None
    clock.move_to(retry_at - timedelta(milliseconds=1))

    assert drain_due().failed == 0
    assert drain_round().timers.failed == 0
    drain_saga_timeouts()  # the Celery task, run in-process
    out = StringIO()
    call_command("drain_saga_timeouts", "--until-empty", stdout=out)

    assert out.getvalue().splitlines()[-1].startswith("fired=0 missed=0 failed=0")
    assert len(failing_mailer.envelopes) == 1
    assert follow_up().attempts == 1
    clock.move_to(retry_at)
    assert drain_due().failed == 1
    assert follow_up().attempts == 2


def test_one_celery_drain_task_run_counts_one_attempt_of_a_failing_receiver(
    failing_mailer: Any,
) -> None:
    result = drain_saga_timeouts()

    assert result["failed"] == 1
    assert follow_up().attempts == 1  # it used to be MAX_DISPATCH_ATTEMPTS within one run


def test_a_receiver_that_recovers_within_the_backoff_costs_only_a_delay(
    failing_mailer: Any, clock: FrozenDateTimeFactory
) -> None:
    drain_due()
    failing_mailer.fail_with = None  # the gateway is back
    clock.tick(timedelta(seconds=5))

    assert drain_due().fired == 1
    row = follow_up()
    assert (row.outcome, row.attempts, row.next_attempt_at) == (TimeoutOutcome.FIRED, 1, None)


def test_a_timer_dead_lettered_at_the_attempt_limit_has_no_next_attempt(
    failing_mailer: Any, clock: FrozenDateTimeFactory
) -> None:
    with override_settings(BSFT_SAGA={"DELIVERY": {"MAX_DISPATCH_ATTEMPTS": 2}}):
        drain_due()
        retry_at = follow_up().next_attempt_at
        assert retry_at is not None
        clock.move_to(retry_at)
        assert drain_due().dead_lettered == 1

    row = follow_up()
    assert (row.outcome, row.attempts, row.next_attempt_at) == (
        TimeoutOutcome.DEAD_LETTERED,
        2,
        None,
    )


def test_the_harness_retries_a_failing_timer_when_time_passes_its_next_attempt(
    record: Any,
) -> None:
    mailer = record(QuoteFollowUpDue)
    mailer.fail_with = GatewayHiccup("down for a minute")
    mailer.fail_if = lambda envelope: len(mailer.envelopes) <= 2

    with SagaHarness(start=T0) as harness:
        harness.publish(QuoteSent("q-1"))
        harness.advance_time(timedelta(days=2))
        assert follow_up().attempts == 1  # due exactly at the end of the move: tried once
        harness.drain_timeouts()
        assert follow_up().attempts == 1  # not before its back-off
        harness.advance_time(timedelta(minutes=1))  # retries at ~5 s and ~15 s

    row = follow_up()
    assert (row.outcome, row.attempts) == (TimeoutOutcome.FIRED, 2)
    assert len(mailer.envelopes) == 3


# --- outbox rows follow the same rule --------------------------------------------------------


@pytest.fixture
def failing_deferred_receiver(record: Any, clock: FrozenDateTimeFactory) -> Any:
    receiver = record(Unrouted)
    receiver.fail_with = GatewayHiccup("warehouse: 503")
    publish(Unrouted("hand-off"), defer=True)  # this test's transaction never commits
    return receiver


def test_a_failed_outbox_row_waits_for_its_retry_like_a_timer(
    failing_deferred_receiver: Any, clock: FrozenDateTimeFactory
) -> None:
    assert deliver_pending().failed == 1
    row = SagaOutboxMessage.objects.get()
    assert row.next_attempt_at is not None
    assert T0 + timedelta(seconds=4) <= row.next_attempt_at <= T0 + timedelta(seconds=5)
    assert row.status() == DeliveryStatus.RETRYING

    clock.move_to(row.next_attempt_at - timedelta(milliseconds=1))
    assert deliver_pending().failed == 0
    assert drain_round().outbox.failed == 0
    clock.move_to(row.next_attempt_at)
    assert deliver_pending().failed == 1
    assert SagaOutboxMessage.objects.get().attempts == 2


def test_an_outbox_row_dead_lettered_at_the_limit_is_counted(
    failing_deferred_receiver: Any, clock: FrozenDateTimeFactory
) -> None:
    otel = telemetry_fixtures.install()
    before = otel.counter_value("bsft.saga.outbox.dead_lettered", **{"saga.type": ""})
    with override_settings(BSFT_SAGA={"DELIVERY": {"MAX_DISPATCH_ATTEMPTS": 1}}):
        assert deliver_pending().dead_lettered == 1

    row = SagaOutboxMessage.objects.get()
    assert row.dead_lettered_at is not None
    assert (row.next_attempt_at, row.attempts) == (None, 1)
    assert "warehouse: 503" in row.last_error
    after = otel.counter_value("bsft.saga.outbox.dead_lettered", **{"saga.type": ""})
    assert after - before == 1
