"""One lifecycle for timers and outbox rows, defined once in ``bsft_saga.querysets``: a row's
``status()`` in Python and ``in_status()`` in SQL must always agree (a timer's state used to
be derived from five columns in seven places, and the places disagreed).
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest

from bsft_saga import clock
from bsft_saga.models import SagaOutboxMessage, SagaTimeout
from bsft_saga.querysets import OUTBOX_STATUSES, TIMER_STATUSES, DeliveryStatus
from tests.testapp.ops_flows import make_saga, make_timer

pytestmark = pytest.mark.django_db

S = DeliveryStatus


def _timers() -> tuple[dict[DeliveryStatus, SagaTimeout], SagaTimeout]:
    """A timer in each status, and one that is ready again past its back-off and lease."""
    now = clock.now()
    saga = make_saga("status")
    rows = {
        S.WAITING: make_timer(saga, "waiting", due_at=now + timedelta(hours=1)),
        S.READY: make_timer(saga, "ready", due_at=now - timedelta(seconds=1)),
        S.RETRYING: make_timer(saga, "retrying", due_at=now - timedelta(minutes=1)),
        S.CLAIMED: make_timer(saga, "claimed", due_at=now - timedelta(minutes=1)),
        S.FIRED: make_timer(saga, "fired", outcome="fired"),
        S.MISSED: make_timer(saga, "missed", outcome="missed"),
        S.CANCELED: make_timer(saga, "canceled", outcome="canceled"),
        S.DEAD_LETTERED: make_timer(saga, "dead", outcome="dead_lettered"),
    }
    SagaTimeout.objects.filter(pk=rows[S.RETRYING].pk).update(
        attempts=1, next_attempt_at=now + timedelta(seconds=5)
    )
    SagaTimeout.objects.filter(pk=rows[S.CLAIMED].pk).update(
        claim_token=uuid.uuid4(), claimed_until=now + timedelta(minutes=5)
    )
    # Past a back-off and past a lease: ready again.
    ready_again = make_timer(saga, "retried", due_at=now - timedelta(minutes=2))
    SagaTimeout.objects.filter(pk=ready_again.pk).update(
        attempts=2, next_attempt_at=now - timedelta(seconds=1), claimed_until=now - timedelta(1)
    )
    fresh = {status: SagaTimeout.objects.get(pk=row.pk) for status, row in rows.items()}
    return fresh, SagaTimeout.objects.get(pk=ready_again.pk)


def _outbox_rows() -> tuple[dict[DeliveryStatus, SagaOutboxMessage], SagaOutboxMessage]:
    """An outbox row in each status, and a delayed message whose time has come (ready)."""
    now = clock.now()

    def row(**values: Any) -> SagaOutboxMessage:
        return SagaOutboxMessage.objects.create(
            event_type="tests.engine.unrouted", payload={}, created_at=now, **values
        )

    rows = {
        S.WAITING: row(deliver_at=now + timedelta(hours=1)),
        S.READY: row(),
        S.RETRYING: row(attempts=1, next_attempt_at=now + timedelta(seconds=5)),
        S.CLAIMED: row(claim_token=uuid.uuid4(), claimed_until=now + timedelta(minutes=5)),
        S.DELIVERED: row(delivered_at=now),
        S.DEAD_LETTERED: row(attempts=10, dead_lettered_at=now),
    }
    return rows, row(deliver_at=now - timedelta(seconds=1))


def test_every_timer_status_is_the_same_in_python_and_in_sql() -> None:
    rows, ready_again = _timers()
    now = clock.now()

    for status, row in rows.items():
        assert row.status(now) == status
    assert ready_again.status(now) == S.READY
    everyone = [*rows.values(), ready_again]
    for status in TIMER_STATUSES:
        in_sql = set(SagaTimeout.objects.in_status(status, now))
        assert in_sql == {row for row in everyone if row.status(now) == status}, status


def test_every_outbox_status_is_the_same_in_python_and_in_sql() -> None:
    rows, delayed_and_due = _outbox_rows()
    now = clock.now()

    for status, row in rows.items():
        assert row.status(now) == status
    assert delayed_and_due.status(now) == S.READY
    everyone = [*rows.values(), delayed_and_due]
    for status in OUTBOX_STATUSES:
        in_sql = set(SagaOutboxMessage.objects.in_status(status, now))
        assert in_sql == {row for row in everyone if row.status(now) == status}, status


def test_what_a_pass_may_claim_is_the_ready_status() -> None:
    rows, ready_again = _timers()

    assert set(SagaTimeout.objects.claimable(clock.now())) == {rows[S.READY], ready_again}
