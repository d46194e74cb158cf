"""``ENGINE.MAX_PUBLISH_DEPTH``: a step whose event reaches its own saga again, synchronously,
is stopped by ``PublishDepthExceeded`` one delivery too deep, with every window written up
to there whole and nothing of the step that was refused; never by ``RecursionError``.

``EchoFlow`` answers ``Echo`` with ``ctx.publish(Echo)`` meanwhile (delivered right after
each window commits, nested in the delivery that committed it) and ``Shout`` with
``publish(Shout)`` from the body (sent at once, inside the body)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from freezegun.api import FrozenDateTimeFactory

from bsft_saga import PublishDepthExceeded, publish
from bsft_saga.draining import drain_round
from bsft_saga.models import (
    SagaInboxEntry,
    SagaInstance,
    SagaJournalEntry,
    SagaOutboxMessage,
    SagaTimeout,
)
from tests.testapp.loop_events import Echo, EchoStarted, Shout
from tests.testapp.loop_flows import KICK_AFTER, EchoFlow

pytestmark = pytest.mark.django_db(transaction=True)

LIMIT = 5


@pytest.fixture
def shallow(settings: Any) -> None:
    settings.BSFT_SAGA = {**settings.BSFT_SAGA, "ENGINE": {"MAX_PUBLISH_DEPTH": LIMIT}}


def echo_saga() -> SagaInstance:
    return SagaInstance.objects.get(saga_type=EchoFlow.saga_type, correlation_key="k")


def pending_rows() -> list[SagaOutboxMessage]:
    return list(SagaOutboxMessage.objects.filter(delivered_at=None))


def assert_whole_windows_only(saga: SagaInstance) -> None:
    """Every handled event moved the version once, with one inbox row and one journal
    entry; the start is the first of them."""
    handled = 1 + saga.state["heard"]
    assert saga.version == handled
    assert SagaInboxEntry.objects.filter(saga=saga).count() == handled
    assert SagaJournalEntry.objects.filter(saga=saga).count() == handled


def test_a_meanwhile_body_answering_its_own_event_is_stopped_at_the_limit(
    clock: FrozenDateTimeFactory, shallow: None
) -> None:
    publish(EchoStarted("k"))
    publish(Echo("k", 1000))  # returns: the rounds after the first are after-commit deliveries

    saga = echo_saga()
    # publish() is a delivery in progress, and so is each round's after-commit delivery of
    # the next Echo: the step is refused on reaching the saga LIMIT + 1 deliveries deep.
    assert saga.state["heard"] == LIMIT - 1
    assert_whole_windows_only(saga)
    [refused] = pending_rows()
    assert refused.event_type == "tests.loop.echo"
    assert not SagaInboxEntry.objects.filter(message_id=refused.pk).exists()
    assert (refused.attempts, refused.dead_lettered_at) == (1, None)
    assert refused.next_attempt_at is not None
    assert refused.last_error.startswith("PublishDepthExceeded: flow ")
    for named in ("EchoFlow", "'tests.loop.echo'", "step 1", f"{LIMIT + 1} synchronous"):
        assert named in refused.last_error


def test_the_drain_retries_the_refused_row_and_the_limit_holds_there_too(
    clock: FrozenDateTimeFactory, shallow: None
) -> None:
    publish(EchoStarted("k"))
    publish(Echo("k", 1000))
    [refused] = pending_rows()

    clock.tick(timedelta(seconds=10))  # past the first back-off, before the kick timer
    report = drain_round()

    saga = echo_saga()
    # The drain delivers the row one level deep: LIMIT rounds, then the next row is refused.
    assert saga.state["heard"] == (LIMIT - 1) + LIMIT
    assert_whole_windows_only(saga)
    refused.refresh_from_db()
    assert refused.delivered_at is not None
    [again] = pending_rows()
    assert again.pk != refused.pk
    assert again.attempts == 1
    assert "PublishDepthExceeded" in again.last_error
    assert report.outbox.delivered == 1


def test_a_loop_a_timer_wakes_is_stopped_at_the_limit(
    clock: FrozenDateTimeFactory, shallow: None
) -> None:
    publish(EchoStarted("k"))
    clock.tick(KICK_AFTER)

    report = drain_round()

    saga = echo_saga()
    assert report.timers.fired == 1
    assert SagaTimeout.objects.get(saga=saga, name="kick").outcome == "fired"
    assert saga.state["heard"] == LIMIT  # the timer's Echo one level deep, LIMIT - 1 more
    assert_whole_windows_only(saga)
    [refused] = pending_rows()
    assert "PublishDepthExceeded" in refused.last_error


def test_a_body_publishing_its_own_event_at_once_fails_its_publish_with_nothing_written(
    shallow: None,
) -> None:
    publish(EchoStarted("k"))

    with pytest.raises(PublishDepthExceeded) as raised:
        publish(Shout("k", 1000))

    error = raised.value
    assert isinstance(error, RuntimeError)
    assert (error.event_type, error.depth, error.limit) == ("tests.loop.shout", LIMIT + 1, LIMIT)
    assert "EchoFlow" in error.where
    assert "step 1" in error.where
    message = str(error)
    assert "tests.loop.shout" in message
    assert "MAX_PUBLISH_DEPTH" in message
    saga = echo_saga()
    assert saga.state["heard"] == 0  # every body on the way raised: no window committed
    assert_whole_windows_only(saga)
    assert not SagaOutboxMessage.objects.exists()


def test_a_chain_as_deep_as_the_limit_runs_to_its_end(
    clock: FrozenDateTimeFactory, shallow: None
) -> None:
    publish(EchoStarted("k"))

    publish(Echo("k", LIMIT - 2))  # LIMIT - 1 rounds, the last one LIMIT deliveries deep

    saga = echo_saga()
    assert saga.state["heard"] == LIMIT - 1
    assert_whole_windows_only(saga)
    assert pending_rows() == []


def test_with_the_default_limit_a_loop_ends_in_the_error_not_in_recursion(
    clock: FrozenDateTimeFactory,
) -> None:
    publish(EchoStarted("k"))

    publish(Echo("k", 1000))
    with pytest.raises(PublishDepthExceeded, match=r"17 synchronous deliveries deep"):
        publish(Shout("k", 1000))

    saga = echo_saga()
    assert saga.state["heard"] == 16 - 1
    [refused] = pending_rows()
    assert "(16)" in refused.last_error
