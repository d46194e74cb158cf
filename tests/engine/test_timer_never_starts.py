"""A timer's event never starts a saga: a timer belongs to its saga, and a flow whose
``start_with`` takes the event's type ignores an envelope that a timer sent (counted on
``bsft.saga.event.ignored`` with ``reason="timer_never_starts"``). The event still reaches
its own saga, other sagas that wait for it, and plain receivers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta

import pytest
from freezegun.api import FrozenDateTimeFactory

from bsft_saga import publish
from bsft_saga.models import SagaInstance
from bsft_saga.outbox import deliver_pending
from bsft_saga.timeouts import drain_due
from tests.support import telemetry as telemetry_fixtures
from tests.support.timer_fixtures import T0
from tests.testapp.delayed_events import CaseOpened, ChaseDue, WatchStarted
from tests.testapp.delayed_flows import (
    CHASE_AFTER,
    CaseFlow,
    CaseState,
    ChaseAuditFlow,
    ChaseWatchFlow,
    WatchState,
)
from tests.testapp.timer_flows import Recorder, saga_of, the_saga

pytestmark = pytest.mark.django_db

IGNORED = "bsft.saga.event.ignored"


def _never_started() -> int:
    otel = telemetry_fixtures.install()
    return otel.counter_value(
        IGNORED, **{"saga.type": ChaseAuditFlow.saga_type, "reason": "timer_never_starts"}
    )


def _fire_the_chase(clock: FrozenDateTimeFactory) -> None:
    clock.move_to(T0 + CHASE_AFTER)
    assert drain_due().fired == 1


def test_a_timers_event_starts_no_saga_of_a_flow_that_starts_with_its_type(
    clock: FrozenDateTimeFactory, caplog: pytest.LogCaptureFixture
) -> None:
    publish(CaseOpened("c-1"))
    before = _never_started()

    with caplog.at_level(logging.DEBUG, logger="bsft_saga.engine.handler"):
        _fire_the_chase(clock)

    assert saga_of(ChaseAuditFlow, "c-1") is None
    assert _never_started() - before == 1
    assert any(
        "ignored by flow" in line and "timer_never_starts" in line
        for line in (record.getMessage() for record in caplog.records)
    )


def test_a_timers_event_still_reaches_its_saga_other_sagas_waits_and_plain_receivers(
    clock: FrozenDateTimeFactory, record: Callable[..., Recorder]
) -> None:
    publish(CaseOpened("c-1"))
    publish(WatchStarted("c-1"))
    chases = record(ChaseDue)

    _fire_the_chase(clock)

    case = the_saga(CaseFlow, "c-1")
    assert (case.step_index, CaseState(**case.state)) == (2, CaseState(chased=1))
    watch = the_saga(ChaseWatchFlow, "c-1")
    assert (watch.is_complete, WatchState(**watch.state)) == (True, WatchState(chases_seen=1))
    [envelope] = chases.envelopes
    assert envelope.timer is not None
    assert envelope.timer.saga_id == case.pk


def test_a_published_event_of_that_type_starts_the_flow() -> None:
    publish(ChaseDue("c-2"))

    assert the_saga(ChaseAuditFlow, "c-2").step_index == 1


def test_a_delayed_message_of_that_type_starts_the_flow_it_is_no_timer(
    clock: FrozenDateTimeFactory,
) -> None:
    publish(ChaseDue("c-3"), delay=timedelta(hours=1))
    clock.move_to(T0 + timedelta(hours=1))

    assert deliver_pending().delivered == 1

    assert the_saga(ChaseAuditFlow, "c-3").step_index == 1
    assert SagaInstance.objects.filter(saga_type=ChaseAuditFlow.saga_type).count() == 1
