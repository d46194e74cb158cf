"""``envelope.timer`` (a ``TimerOrigin``) names the timer that sent the event, with its
``due_at`` and ``scheduled_at``: a receiver, or the step the timer wakes, can tell how late
the event is."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from freezegun.api import FrozenDateTimeFactory

from bsft_saga import clock as saga_clock
from bsft_saga import publish
from bsft_saga.models import SagaTimeout
from bsft_saga.timeouts import drain_due
from tests.support.timer_fixtures import T0
from tests.testapp.delayed_events import CaseOpened, ChaseDue
from tests.testapp.delayed_flows import CHASE_AFTER
from tests.testapp.timer_events import ProbePoked, ProbeStarted
from tests.testapp.timer_flows import Recorder

pytestmark = pytest.mark.django_db

LATE = timedelta(hours=3)


def test_a_timers_envelope_carries_its_due_and_scheduling_times(
    clock: FrozenDateTimeFactory, record: Callable[..., Recorder]
) -> None:
    publish(CaseOpened("c-1"))
    chases = record(ChaseDue)
    clock.move_to(T0 + CHASE_AFTER + LATE)

    assert drain_due().fired == 1

    [envelope] = chases.envelopes
    timer = envelope.timer
    assert timer is not None
    row = SagaTimeout.objects.get(pk=timer.timer_id)
    assert (timer.due_at, timer.scheduled_at) == (row.due_at, row.scheduled_at)
    assert (timer.due_at, timer.scheduled_at) == (T0 + CHASE_AFTER, T0)
    assert timer.due_at.utcoffset() == timer.scheduled_at.utcoffset() == timedelta(0)
    assert saga_clock.now() - timer.due_at == LATE


def test_the_step_a_timer_wakes_can_tell_how_late_it_runs(
    clock: FrozenDateTimeFactory, action: Callable[[Callable[[Any, Any], None]], str]
) -> None:
    lateness: list[timedelta] = []

    def note_lateness(ctx: Any, e: ProbePoked) -> None:
        assert ctx.envelope.timer is not None
        lateness.append(ctx.now - ctx.envelope.timer.due_at)

    def schedule(ctx: Any, e: ProbeStarted) -> None:
        ctx.schedule_timeout("poke", timedelta(minutes=10), ProbePoked(e.probe_id, late))

    late = action(note_lateness)
    publish(ProbeStarted("p-1", action(schedule)))
    clock.move_to(T0 + timedelta(minutes=10) + LATE)

    assert drain_due().fired == 1
    assert lateness == [LATE]
