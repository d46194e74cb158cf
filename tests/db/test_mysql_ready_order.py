"""Concurrent claims share the backlog: each takes the next ready rows, down an index in the
claim's order, and locks only those.

On PostgreSQL and SQLite the partial indexes on the ready time serve the claim. On MariaDB
and MySQL the stored ``ready_at`` column and its index of migration ``0004_mysql_ready_order``
do: without them InnoDB read and locked every ready row to sort them before the ``LIMIT``,
and a second dispatcher's ``SKIP LOCKED`` found nothing while the first held its batch.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from bsft_saga.delivery.channel import Channel
from bsft_saga.delivery.claim import claim
from bsft_saga.kept.channel import KEPT
from bsft_saga.models import SagaInstance, SagaKeptEvent, SagaOutboxMessage, SagaTimeout
from bsft_saga.outbox.channel import OUTBOX
from bsft_saga.timeouts.channel import TIMERS
from tests.support.services import require_mysql_backend, require_server_database
from tests.support.timer_fixtures import T0
from tests.testapp.ops_flows import make_saga

#: Ready rows per table, and retired (or not yet ready) ones beside them.
READY = 60
OTHERS = 240
BATCH = 20
NOW = T0 + timedelta(hours=1)
LEASE = timedelta(minutes=5)


def _timers(saga: SagaInstance) -> None:
    SagaTimeout.objects.bulk_create(
        SagaTimeout(
            saga=saga,
            name=f"t-{n}",
            due_at=T0 + timedelta(seconds=n),
            event_type="tests.ops.reminder-due",
            payload={},
            scheduled_step_index=1,
            scheduled_at=T0,
            # The others fired already: a pending timer is ready, a retired one never.
            dispatched_at=T0 if n >= READY else None,
            outcome="fired" if n >= READY else None,
        )
        for n in range(READY + OTHERS)
    )


def _outbox(saga: SagaInstance) -> None:
    SagaOutboxMessage.objects.bulk_create(
        SagaOutboxMessage(
            saga=saga,
            event_type="tests.ops.reminder-due",
            payload={},
            created_at=T0 + timedelta(seconds=n),
            delivered_at=T0 if n >= READY else None,
        )
        for n in range(READY + OTHERS)
    )


def _kept(saga: SagaInstance) -> None:
    SagaKeptEvent.objects.bulk_create(
        SagaKeptEvent(
            saga=saga,
            saga_type=saga.saga_type,
            correlation_key=saga.correlation_key,
            step_index=1,
            event_type="tests.ops.reminder-due",
            payload={},
            message_id=uuid.uuid4(),
            kept_at=T0,
            # The others wait for a later step, or were dead-lettered.
            next_attempt_at=T0 + timedelta(seconds=n) if n < READY or n % 2 else None,
            dead_lettered_at=T0 if n >= READY and n % 2 else None,
        )
        for n in range(READY + OTHERS)
    )


#: Each channel, how its backlog is written, and the index of migration 0004 its claim reads.
CHANNELS: dict[str, tuple[Channel[Any], Callable[[SagaInstance], None], str]] = {
    "timers": (TIMERS, _timers, "bsft_saga_timeout_ready_at_idx"),
    "outbox": (OUTBOX, _outbox, "bsft_saga_outbox_ready_at_idx"),
    "kept events": (KEPT, _kept, "bsft_saga_kept_ready_at_idx"),
}


def _backlog(name: str) -> Channel[Any]:
    channel, write, _index = CHANNELS[name]
    write(make_saga("backlog", now=T0))
    return channel


def _claimed_pks(channel: Channel[Any]) -> list[Any]:
    return [
        row.pk for row in claim(channel, limit=BATCH, token=uuid.uuid4(), now=NOW, lease=LEASE).rows
    ]


@pytest.mark.django_db
@pytest.mark.parametrize("name", CHANNELS)
def test_the_claim_reads_the_ready_order_index_without_sorting_on_mysql(name: str) -> None:
    require_mysql_backend()
    channel = _backlog(name)

    with CaptureQueriesContext(connection) as queries:
        assert len(_claimed_pks(channel)) == BATCH
    [locking] = [q["sql"] for q in queries.captured_queries if "SKIP LOCKED" in q["sql"]]
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {locking}")
        columns = [column[0] for column in cursor.description]
        [plan] = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]

    assert plan["key"] == CHANNELS[name][2], plan
    assert plan["type"] == "range", plan
    assert "filesort" not in plan["Extra"], plan


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("name", CHANNELS)
def test_a_claim_takes_the_next_ready_rows_while_another_claim_holds_its_batch(
    name: str,
) -> None:
    require_server_database()
    channel = _backlog(name)
    in_order = list(channel.claimable(NOW).values_list("pk", flat=True))
    second: list[Any] = []
    errors: list[BaseException] = []

    def claim_beside() -> None:
        try:
            second.extend(_claimed_pks(channel))
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    with transaction.atomic():  # the first claim's transaction, its batch locked
        locking = channel.claimable(NOW).select_for_update(skip_locked=True)
        first = list(locking[:BATCH].values_list("pk", flat=True))
        beside = threading.Thread(target=claim_beside)
        beside.start()
        beside.join(timeout=60)
    assert not beside.is_alive()
    if errors:
        raise errors[0]

    assert first == in_order[:BATCH]
    assert second == in_order[BATCH : 2 * BATCH]
