"""The one drain loop (``bsft_saga.draining.drain``): when each caller's loop stops, and
what a round that loses its database connection does to it. Rounds are stand-ins here;
the real rounds are everywhere else (the harness, tests/management/, tests/test_tasks.py,
and a real failover in tests/processes/test_failover.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import datetime

import pytest
from django.db import OperationalError

from bsft_saga import draining
from bsft_saga.delivery.report import DeliveryReport
from bsft_saga.draining import RoundReport, Until, drain
from bsft_saga.timeouts.dispatcher import DrainReport

WORK = RoundReport(timers=DrainReport(fired=2), outbox=DeliveryReport(delivered=1))
IDLE = RoundReport()
LOST = OperationalError("server closed the connection unexpectedly")


@pytest.fixture
def rounds(monkeypatch: pytest.MonkeyPatch) -> Callable[..., list[int]]:
    """Make the loop's rounds come out as given (a report, or an error to raise); returns
    the list that counts the rounds run."""

    def script(*outcomes: RoundReport | Exception) -> list[int]:
        ran: list[int] = []
        queue: Iterator[RoundReport | Exception] = iter(outcomes)

        def drain_round(
            *, batch_size: int | None = None, now: datetime | None = None
        ) -> RoundReport:
            ran.append(1)
            outcome = next(queue, IDLE)
            if isinstance(outcome, Exception):
                raise outcome
            return outcome

        monkeypatch.setattr(draining, "drain_round", drain_round)
        monkeypatch.setattr(draining, "RECONNECT_PAUSE", 0.01)
        return ran

    return script


def test_one_round_runs_one_round_whatever_it_found(rounds: Callable[..., list[int]]) -> None:
    ran = rounds(WORK, WORK)

    assert drain(Until.ONE_ROUND) == WORK
    assert len(ran) == 1


def test_until_empty_adds_up_the_rounds_until_one_finds_no_work(
    rounds: Callable[..., list[int]],
) -> None:
    ran = rounds(WORK, WORK, IDLE, WORK)

    assert drain(Until.EMPTY) == WORK + WORK
    assert len(ran) == 3


def test_a_failed_attempt_is_no_work(rounds: Callable[..., list[int]]) -> None:
    ran = rounds(RoundReport(timers=DrainReport(failed=1)), WORK)

    assert drain(Until.EMPTY).timers.failed == 1
    assert len(ran) == 1


@pytest.mark.parametrize("until", [Until.ONE_ROUND, Until.EMPTY])
def test_a_loop_that_stops_when_idle_raises_a_lost_connection(
    rounds: Callable[..., list[int]], until: Until
) -> None:
    rounds(LOST)

    with pytest.raises(OperationalError):
        drain(until)


def test_the_celery_tasks_loop_outlives_a_lost_connection_and_tells_of_it(
    rounds: Callable[..., list[int]],
) -> None:
    ran = rounds(LOST, WORK, IDLE)
    told: list[tuple[int, RoundReport | Exception]] = []

    total = drain(Until.POLL_INTERVAL, on_round=lambda n, r: told.append((n, r)))

    assert total == WORK
    assert len(ran) == 3
    assert told == [(1, LOST), (2, WORK), (3, IDLE)]


def test_the_celery_tasks_loop_stops_when_no_time_is_left_for_another_round(
    rounds: Callable[..., list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    ran = rounds(LOST, WORK)
    monkeypatch.setattr(draining, "RECONNECT_PAUSE", 60.0)  # past POLL_INTERVAL

    assert drain(Until.POLL_INTERVAL) == IDLE
    assert len(ran) == 1


def test_a_dispatcher_loop_goes_on_after_idle_and_failed_rounds_until_stopped(
    rounds: Callable[..., list[int]],
) -> None:
    stop = threading.Event()
    rounds(IDLE, LOST, WORK)
    seen: list[int] = []

    def on_round(number: int, report: RoundReport | Exception) -> None:
        seen.append(number)
        if report == WORK:
            stop.set()  # as SIGTERM does; the wait after an idle round ends early

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(stop, "wait", lambda timeout=None: stop.is_set())
        assert drain(Until.STOPPED, stop=stop, on_round=on_round) == WORK

    assert seen == [1, 2, 3]


def test_only_a_dispatcher_loop_refreshes_its_connection_before_every_round(
    rounds: Callable[..., list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``CONN_MAX_AGE = 0`` a refresh reconnects: a loop within one task or command
    keeps its connection from round to round, and replaces it only once it is lost."""
    refreshed: list[int] = []
    monkeypatch.setattr(draining, "refresh_idle_connections", lambda: refreshed.append(1))

    rounds(WORK, WORK, IDLE)
    drain(Until.EMPTY)
    assert refreshed == []

    rounds(LOST, WORK, IDLE)
    drain(Until.POLL_INTERVAL)
    assert len(refreshed) == 1

    stop = threading.Event()

    def stop_after_two(number: int, report: RoundReport | Exception) -> None:
        if number == 2:
            stop.set()

    rounds(WORK, WORK)
    drain(Until.STOPPED, stop=stop, on_round=stop_after_two)
    assert len(refreshed) == 1 + 2
