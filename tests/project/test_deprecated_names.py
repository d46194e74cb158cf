"""Names renamed to the glossary's words still work, and say what to use instead."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from bsft_saga import telemetry
from bsft_saga.delivery import requeue
from bsft_saga.delivery.requeue import RequeueReport
from bsft_saga.engine import termination
from bsft_saga.engine.termination import TerminationReport
from bsft_saga.events.envelope import TimerOrigin
from bsft_saga.models import SagaOutboxMessage
from bsft_saga.timeouts import expedite
from bsft_saga.timeouts.expedite import FireNowReport


@pytest.mark.parametrize(
    ("module", "old", "new"),
    [
        (requeue, "RequeueResult", RequeueReport),
        (termination, "TerminationResult", TerminationReport),
        (expedite, "FireNowResult", FireNowReport),
    ],
)
def test_a_report_under_its_old_name_is_the_report_and_warns(
    module: object, old: str, new: type
) -> None:
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated; use {new.__name__}"):
        assert getattr(module, old) is new


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'NoSuchResult'"):
        _ = requeue.NoSuchResult


def test_a_timer_origins_timeout_id_is_its_timer_id_and_warns() -> None:
    due = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
    origin = TimerOrigin(
        timer_id=7,
        saga_id=uuid.uuid4(),
        name="n",
        claim_token=uuid.uuid4(),
        due_at=due,
        scheduled_at=due - timedelta(hours=1),
    )

    with pytest.warns(DeprecationWarning, match="use timer_id"):
        assert origin.timeout_id == 7


@pytest.mark.django_db
def test_undelivered_outbox_rows_are_the_pending_ones_and_warn() -> None:
    with pytest.warns(DeprecationWarning, match="use pending"):
        undelivered = SagaOutboxMessage.objects.undelivered()
    assert str(undelivered.query) == str(SagaOutboxMessage.objects.pending().query)


def test_timeout_span_is_timer_span_and_warns() -> None:
    with (
        pytest.warns(DeprecationWarning, match="use timer_span"),
        telemetry.timeout_span("tests.flow", "reminder"),
    ):
        pass
