"""The rows a claim hands to its pass are the rows the ORM would load.

A claim reads its timers as values and builds them without the ORM's work per row, and
reads their sagas with the lookups of the steps they wake: what it returns must still be
the instances the ORM would have loaded, field for field, saved or read as any other.
"""

from __future__ import annotations

import uuid

import pytest

from bsft_saga import clock, publish
from bsft_saga.conf import saga_settings
from bsft_saga.delivery.claim import claim
from bsft_saga.models import SagaInstance, SagaTimeout
from bsft_saga.timeouts.channel import TIMERS
from tests.testapp.load_events import CountStarted

pytestmark = pytest.mark.django_db(transaction=True)


def _claim_all() -> list[SagaTimeout]:
    token = uuid.uuid4()
    lease = saga_settings.delivery.claim_lease
    return claim(TIMERS, limit=10, token=token, now=clock.now(), lease=lease).rows


def _fields(row: SagaTimeout | SagaInstance) -> dict[str, object]:
    return {field.attname: getattr(row, field.attname) for field in row._meta.concrete_fields}


def test_a_claimed_timer_holds_what_the_orm_loads_of_it() -> None:
    publish(CountStarted("claimed-row"))

    [row] = _claim_all()

    stored = SagaTimeout.objects.get(pk=row.pk)
    assert _fields(row) == _fields(stored)
    assert row == stored
    assert (row._state.adding, row._state.db) == (False, "default")
    assert row.get_deferred_fields() == set()


def test_a_claimed_timers_saga_reads_the_fields_the_claim_left_out_when_used() -> None:
    publish(CountStarted("claimed-saga"))

    [row] = _claim_all()

    stored = SagaInstance.objects.get(pk=row.saga_id)
    assert row.saga == stored
    assert (row.saga.saga_type, row.saga.correlation_key) == (stored.saga_type, "claimed-saga")
    assert "created_at" in row.saga.get_deferred_fields()
    assert _fields(row.saga) == _fields(stored)  # the deferred ones read on use


def test_a_claimed_timer_saves_like_any_other() -> None:
    publish(CountStarted("claimed-save"))
    [row] = _claim_all()

    row.last_error = "noted"
    row.save(update_fields=["last_error"])

    assert SagaTimeout.objects.get(pk=row.pk).last_error == "noted"
