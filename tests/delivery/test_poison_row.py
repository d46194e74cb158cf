"""One poison row among a thousand due timers.

A timer whose stored event type no longer resolves fails on every attempt. It must not keep
the other 999 from firing, must wait out a doubling back-off between its attempts (a pass
before then leaves it alone), must be retired to the dead-letter state after exactly
``MAX_DISPATCH_ATTEMPTS`` attempts, and must come back as pending when an operator requeues
it. Runs on both backends.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings
from django.utils import timezone

from bsft_saga import publish
from bsft_saga.models import SagaInstance, SagaTimeout, TimeoutOutcome
from bsft_saga.timeouts import DrainReport, drain_due
from bsft_saga.timeouts.maintenance import requeue_dead_lettered
from tests.testapp.ops_events import NudgeRequested
from tests.testapp.ops_flows import NUDGE_SAGA_TYPE, bulk_nudge_sagas

SAGAS = 1000
POISON_TYPE = "tests.ops.renamed-in-a-later-release"


@pytest.fixture
def dispatcher_limits() -> Iterator[None]:
    delivery = {**settings.BSFT_SAGA["DELIVERY"], "BATCH_SIZE": 1000, "MAX_DISPATCH_ATTEMPTS": 3}
    with override_settings(BSFT_SAGA={**settings.BSFT_SAGA, "DELIVERY": delivery}):
        yield


@pytest.fixture
def poison(db: Any, dispatcher_limits: None) -> SagaTimeout:
    """1000 nudge sagas with one due timer each; returns the one whose type is gone."""
    bulk_nudge_sagas([f"poison-{number:04d}" for number in range(SAGAS)])
    timers = SagaTimeout.objects.filter(saga__saga_type=NUDGE_SAGA_TYPE).pending()
    assert timers.count() == SAGAS
    row = timers.get(saga__correlation_key="poison-0000")  # due first: the head of every batch
    SagaTimeout.objects.filter(pk=row.pk).update(event_type=POISON_TYPE)
    return SagaTimeout.objects.get(pk=row.pk)


def _fresh(row: SagaTimeout) -> SagaTimeout:
    return SagaTimeout.objects.get(pk=row.pk)


@pytest.mark.slow
def test_one_poison_row_neither_blocks_the_batch_nor_survives_three_passes(
    poison: SagaTimeout,
) -> None:
    first = drain_due()

    assert (first.fired, first.failed, first.dead_lettered) == (SAGAS - 1, 1, 0)
    fired = SagaTimeout.objects.filter(saga__saga_type=NUDGE_SAGA_TYPE, outcome="fired")
    assert fired.count() == SAGAS - 1
    assert (_fresh(poison).attempts, _fresh(poison).dispatched_at) == (1, None)

    first_retry = _fresh(poison).next_attempt_at
    assert first_retry is not None
    # Waiting out its back-off: not tried before then.
    assert drain_due(now=first_retry - timedelta(milliseconds=1)) == DrainReport()

    before = timezone.now()
    second = drain_due(now=first_retry)
    after = timezone.now()
    assert (second.fired, second.failed, second.dead_lettered) == (0, 1, 0)
    assert (_fresh(poison).attempts, _fresh(poison).dispatched_at) == (2, None)
    second_retry = _fresh(poison).next_attempt_at
    assert second_retry is not None
    # The second wait doubles RETRY_BACKOFF (5 s), jittered down by at most a fifth.
    assert before + timedelta(seconds=8) <= second_retry <= after + timedelta(seconds=10)

    third = drain_due(now=second_retry)
    assert (third.fired, third.failed, third.dead_lettered) == (0, 0, 1)
    retired = _fresh(poison)
    assert retired.outcome == TimeoutOutcome.DEAD_LETTERED
    assert retired.dead_lettered_at is not None
    assert retired.dispatched_at is not None
    assert retired.attempts == 3
    assert POISON_TYPE in retired.dead_letter_reason

    assert retired.next_attempt_at is None
    assert drain_due(now=second_retry + timedelta(days=1)).settled == 0  # left for good


@pytest.mark.slow
def test_a_requeued_poison_row_is_pending_again(poison: SagaTimeout) -> None:
    drain_due()
    for _ in range(2):
        drain_due(now=_fresh(poison).next_attempt_at)
    assert _fresh(poison).outcome == TimeoutOutcome.DEAD_LETTERED

    result = requeue_dead_lettered([poison.pk])

    assert (result.requeued, result.refused) == (1, [])
    requeued = _fresh(poison)
    assert requeued.dispatched_at is None
    assert requeued.outcome is None
    assert requeued.attempts == 0
    assert requeued.dead_lettered_at is None
    assert requeued.dead_letter_reason == ""
    assert POISON_TYPE in requeued.last_error  # kept: why it failed stays visible
    assert requeued.next_attempt_at is None
    assert SagaTimeout.objects.claimable(requeued.due_at).filter(pk=poison.pk).exists()


def test_bulk_nudge_rows_match_what_the_flow_writes(db: Any) -> None:
    fields = ("name", "event_type", "payload", "scope", "scheduled_step_index", "attempts")
    publish(NudgeRequested("published"))
    bulk_nudge_sagas(["built"])

    def shape(key: str) -> tuple[Any, ...]:
        saga = SagaInstance.objects.get(saga_type=NUDGE_SAGA_TYPE, correlation_key=key)
        timer = SagaTimeout.objects.get(saga=saga)
        payload = {**timer.payload, "key": "*"}
        row = tuple(payload if f == "payload" else getattr(timer, f) for f in fields)
        return (saga.state_type, saga.state, saga.step_index, saga.is_complete, *row)

    assert shape("built") == shape("published")
