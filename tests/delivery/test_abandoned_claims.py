"""A claim whose pass never finished: its rows are claimed alone, and charged only alone.

A pass killed while delivering (a receiver that segfaults, the OOM killer) leaves its rows
claimed until the lease runs out; nothing records a failure, nor which row it was running.
Any of them may kill the next pass too, so each is claimed again **alone**, free: the rows
the dead pass never started cost nothing. A row abandoned by a pass that ran it alone is the
one that pass was running: claiming it again counts an attempt (``ClaimAbandoned``), and at
``MAX_DISPATCH_ATTEMPTS`` it is dead-lettered: it is neither retried forever nor able to
take its batch-mates down with it again. The real-process versions are in
``test_timeouts_faults.py`` (a receiver that SIGKILLs every dispatcher that fires it) and
``test_killed_loop.py`` (a ``--loop`` dispatcher SIGKILLed halfway through a batch).
"""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone
from freezegun.api import FrozenDateTimeFactory

from bsft_saga import publish
from bsft_saga.conf import saga_settings
from bsft_saga.delivery.channel import Channel
from bsft_saga.delivery.claim import ABANDONED, claim
from bsft_saga.delivery.passes import deliver_claimed
from bsft_saga.delivery.report import DeliveryReport
from bsft_saga.models import (
    JournalKind,
    SagaInstance,
    SagaJournalEntry,
    SagaOutboxMessage,
    SagaTimeout,
    TimeoutOutcome,
)
from bsft_saga.outbox import OUTBOX, deliver_pending
from bsft_saga.timeouts import DrainReport, drain_due
from bsft_saga.timeouts.channel import TIMERS
from bsft_saga.timeouts.maintenance import requeue_dead_lettered
from tests.support import telemetry as telemetry_fixtures
from tests.testapp.engine_events import Unrouted
from tests.testapp.load_events import CountStarted, CountWake
from tests.testapp.load_flows import CountingFlow

pytestmark = pytest.mark.django_db


def _abandon(channel: Channel[Any]) -> list[Any]:
    """Claim what a pass of ``channel`` would claim now, for a pass that then dies without a
    word; return the rows it took."""
    lease = saga_settings.delivery.claim_lease
    return claim(channel, limit=100, token=uuid.uuid4(), now=timezone.now(), lease=lease).rows


def _past_the_lease(frozen: FrozenDateTimeFactory) -> None:
    frozen.tick(saga_settings.delivery.claim_lease + timedelta(seconds=1))


def _start_counters(n: int) -> list[str]:
    keys = [f"abandoned-{i}" for i in range(n)]
    for key in keys:
        publish(CountStarted(key))
    return keys


def _counts(keys: list[str]) -> list[int]:
    sagas = SagaInstance.objects.filter(saga_type=CountingFlow.saga_type)
    return [sagas.get(correlation_key=key).state["count"] for key in keys]


def _charged(keys: list[str]) -> list[tuple[int, str]]:
    timers = SagaTimeout.objects.filter(saga__correlation_key__in=keys)
    by_key = {t.saga.correlation_key: (t.attempts, t.last_error) for t in timers}
    return [by_key[key] for key in keys]


def test_the_rows_of_an_abandoned_batch_are_fired_one_per_pass_none_charged(
    clock: FrozenDateTimeFactory,
) -> None:
    keys = _start_counters(3)
    assert len(_abandon(TIMERS)) == 3
    _past_the_lease(clock)

    reports = [drain_due() for _ in range(4)]

    assert reports == [DrainReport(fired=1)] * 3 + [DrainReport()]
    assert _counts(keys) == [1, 1, 1]
    timers = SagaTimeout.objects.filter(saga__saga_type=CountingFlow.saga_type)
    assert {(t.outcome, t.attempts, t.last_error) for t in timers} == {
        (TimeoutOutcome.FIRED, 0, "")
    }


def test_a_row_of_an_abandoned_batch_is_charged_once_it_also_takes_down_a_pass_running_it_alone(
    clock: FrozenDateTimeFactory,
) -> None:
    keys = _start_counters(3)
    first = keys[0]
    _abandon(TIMERS)  # a batch of three: which one killed it, nothing says
    _past_the_lease(clock)
    [alone] = _abandon(TIMERS)  # the first of them, claimed alone: its pass dies too
    assert alone.saga.correlation_key == first
    _past_the_lease(clock)

    reports = [drain_due() for _ in range(4)]

    assert reports == [DrainReport(fired=1)] * 3 + [DrainReport()]
    assert _counts(keys) == [1, 1, 1]
    assert _charged(keys) == [(1, ABANDONED), (0, ""), (0, "")]


def test_a_batch_finished_in_part_before_its_pass_died_charges_none_of_its_other_rows(
    clock: FrozenDateTimeFactory,
) -> None:
    keys = _start_counters(4)
    token = uuid.uuid4()
    lease = saga_settings.delivery.claim_lease
    rows = claim(TIMERS, limit=100, token=token, now=timezone.now(), lease=lease).rows
    # It committed its first group, then died in the second.
    assert deliver_claimed(TIMERS, rows[:2], token) == DeliveryReport(delivered=2)
    _past_the_lease(clock)

    assert [drain_due() for _ in range(3)] == [DrainReport(fired=1)] * 2 + [DrainReport()]
    assert _counts(keys) == [1, 1, 1, 1]
    assert _charged(keys) == [(0, "")] * 4


def test_rows_nobody_abandoned_wait_while_an_abandoned_row_is_fired_alone(
    clock: FrozenDateTimeFactory,
) -> None:
    [abandoned] = _start_counters(1)
    _abandon(TIMERS)
    _past_the_lease(clock)
    fresh = [f"fresh-{i}" for i in range(2)]
    for key in fresh:
        publish(CountStarted(key))

    assert drain_due() == DrainReport(fired=1)
    assert _counts([abandoned, *fresh]) == [1, 0, 0]
    assert drain_due() == DrainReport(fired=2)  # the next pass is a batch again
    untouched = SagaTimeout.objects.filter(saga__correlation_key__in=fresh)
    assert {(t.attempts, t.last_error) for t in untouched} == {(0, "")}


def test_a_row_whose_claims_keep_running_out_is_dead_lettered_unpublished_and_counted(
    clock: FrozenDateTimeFactory,
) -> None:
    otel = telemetry_fixtures.install()
    attributes = {"saga.type": CountingFlow.saga_type}
    before = otel.counter_value("bsft.saga.timeout.dead_lettered", **attributes)
    [key] = _start_counters(1)
    with override_settings(BSFT_SAGA={"DELIVERY": {"MAX_DISPATCH_ATTEMPTS": 3}}):
        for _ in range(3):  # three passes die on it; each later claim counted one attempt
            _abandon(TIMERS)
            _past_the_lease(clock)
        timer = SagaTimeout.objects.get(saga__correlation_key=key)
        assert (timer.attempts, timer.is_pending) == (2, True)

        report = drain_due()  # counting the third death reaches the limit: given up

    assert report == DrainReport(dead_lettered=1)
    timer.refresh_from_db()
    assert (timer.outcome, timer.attempts, timer.last_error) == (
        TimeoutOutcome.DEAD_LETTERED,
        3,
        ABANDONED,
    )
    assert timer.dead_lettered_at == timezone.now()
    assert _counts([key]) == [0]
    assert otel.counter_value("bsft.saga.timeout.dead_lettered", **attributes) == before + 1
    # Its saga's journal says so, naming the timer.
    [entry] = SagaJournalEntry.objects.filter(saga=timer.saga, kind=JournalKind.DEAD_LETTERED)
    assert (entry.timer_name, entry.message_id) == (timer.name, timer.message_id)

    requeue_dead_lettered([timer.pk])  # the operator fixed what killed the passes
    assert drain_due() == DrainReport(fired=1)
    assert _counts([key]) == [1]


def test_a_batch_given_back_at_shutdown_counts_no_attempt(
    clock: FrozenDateTimeFactory, record: Any
) -> None:
    keys = _start_counters(2)
    shutdown = record(CountWake)
    shutdown.fail_with = KeyboardInterrupt()

    with pytest.raises(KeyboardInterrupt):
        drain_due()
    shutdown.fail_with = None

    assert drain_due() == DrainReport(fired=2)  # one batch, without waiting for a lease
    timers = SagaTimeout.objects.filter(saga__correlation_key__in=keys)
    assert {t.attempts for t in timers} == {0}


def test_a_batch_given_back_at_shutdown_is_logged_as_a_shutdown_not_a_lost_connection(
    clock: FrozenDateTimeFactory, record: Any, caplog: pytest.LogCaptureFixture
) -> None:
    _start_counters(2)
    record(CountWake).fail_with = KeyboardInterrupt()

    with (
        caplog.at_level(logging.INFO, logger="bsft_saga.delivery"),
        pytest.raises(KeyboardInterrupt),
    ):
        drain_due()

    given_back = [r.getMessage() for r in caplog.records if "gave back" in r.getMessage()]
    assert given_back == [
        "bsft_saga: gave back 2 timer row(s) of a pass stopped by KeyboardInterrupt; the "
        "next pass claims them at once"
    ]


def test_an_abandoned_outbox_row_is_delivered_alone_then_given_up_at_the_limit(
    clock: FrozenDateTimeFactory, record: Any
) -> None:
    received = record(Unrouted)
    publish(Unrouted("first"), defer=True)  # this test's transaction never commits:
    publish(Unrouted("second"), defer=True)  # the rows wait for deliver_pending()
    assert len(_abandon(OUTBOX)) == 2
    _past_the_lease(clock)

    assert deliver_pending().delivered == 1  # alone, and free: nothing says it killed the pass
    delivered = SagaOutboxMessage.objects.filter(delivered_at__isnull=False).get()
    assert (delivered.attempts, delivered.last_error) == (0, "")
    assert len(_abandon(OUTBOX)) == 1  # the other one, claimed alone: that pass dies too
    _past_the_lease(clock)

    # Its pass ran nothing else: the lost attempt counts, and is its last one.
    with override_settings(BSFT_SAGA={"DELIVERY": {"MAX_DISPATCH_ATTEMPTS": 1}}):
        report = deliver_pending()

    assert (report.delivered, report.dead_lettered) == (0, 1)
    given_up = SagaOutboxMessage.objects.get(delivered_at__isnull=True)
    assert (given_up.attempts, given_up.last_error) == (1, ABANDONED)
    assert given_up.dead_lettered_at == timezone.now()
    assert [e.message_id for e in received.envelopes] == [delivered.pk]
