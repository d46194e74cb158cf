"""Business code runs outside the dispatcher's transactions.

Step bodies and receivers of an event that a pass delivers (a timer, an outbox row) run with
no transaction open, whichever way the event is delivered; the pass commits what it has
delivered in short groups. Tried the way production fails: slow receivers, a dispatcher
killed mid-batch, ``idle_in_transaction_session_timeout``, a receiver that kills its own
database session.
"""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings
from freezegun.api import FrozenDateTimeFactory

from bsft_saga import publish
from bsft_saga.delivery.failures import CONNECTION_LOST
from bsft_saga.models import SagaInstance, SagaOutboxMessage, SagaTimeout, TimeoutOutcome
from bsft_saga.outbox import deliver_pending
from bsft_saga.signals import deferred_event_committed, event_published
from bsft_saga.tasks import _enqueue_delivery, deliver_event
from bsft_saga.testing import SagaHarness
from bsft_saga.timeouts import drain_due
from tests.support.processes import Child, Supervisor, supervised
from tests.support.services import require_server_database
from tests.testapp.dispatch_events import InvoicePaid, InvoiceReminderDue, InvoiceSent
from tests.testapp.dispatch_flows import InvoiceFlow
from tests.testapp.timer_events import ProbePoked, ProbeStarted
from tests.testapp.timer_flows import ProbeFlow

pytestmark = pytest.mark.django_db(transaction=True)

#: Where user code ran: ``(in_atomic_block, autocommit)`` per call.
OUTSIDE = (False, True)
Seen = list[tuple[bool, bool]]


def _where() -> tuple[bool, bool]:
    return (connection.in_atomic_block, connection.get_autocommit())


@pytest.fixture
def seen(action: Callable[[Any], str]) -> Iterator[tuple[Seen, str]]:
    """Calls of a ProbePoked step body (the action named) and of a plain ProbePoked receiver."""
    calls: Seen = []

    def receiver(sender: type, *, envelope: Any, **kwargs: Any) -> None:
        if isinstance(envelope.event, ProbePoked):
            calls.append(_where())

    name = action(lambda ctx, e: calls.append(_where()))
    event_published.connect(receiver, weak=False, dispatch_uid="tests.dispatch.seen")
    yield calls, name
    event_published.disconnect(dispatch_uid="tests.dispatch.seen")


def _poke_in_an_hour(action: Callable[[Any], str], observe: str) -> str:
    """An action scheduling a ProbePoked timer, an hour ahead, that runs ``observe``."""
    return action(
        lambda ctx, e: ctx.schedule_timeout(
            "poke", timedelta(hours=1), ProbePoked(e.probe_id, observe)
        )
    )


def test_a_timers_step_body_and_receivers_run_with_no_transaction_open(
    clock: FrozenDateTimeFactory, seen: tuple[Seen, str], action: Callable[[Any], str]
) -> None:
    calls, observe = seen
    publish(ProbeStarted("p-timer", _poke_in_an_hour(action, observe)))
    clock.tick(timedelta(hours=1))

    assert drain_due().fired == 1
    assert calls == [OUTSIDE, OUTSIDE]  # the step body, the plain receiver


def test_what_a_step_publishes_is_delivered_after_commit_with_no_transaction_open(
    seen: tuple[Seen, str], action: Callable[[Any], str]
) -> None:
    calls, observe = seen
    publish(ProbeStarted("p-target"))
    forward = action(lambda ctx, e: ctx.publish(ProbePoked("p-target", observe)))

    publish(ProbeStarted("p-source", forward))

    assert calls == [OUTSIDE, OUTSIDE]
    assert not SagaOutboxMessage.objects.pending().exists()


def test_the_outbox_drain_and_the_delivery_task_run_receivers_with_no_transaction_open(
    seen: tuple[Seen, str],
) -> None:
    calls, observe = seen
    publish(ProbeStarted("p-1"))
    publish(ProbeStarted("p-2"))
    # As if the broker were down: the rows stay for the drain and for a later task.
    deferred_event_committed.disconnect(dispatch_uid="bsft_saga.tasks.enqueue")
    try:
        publish(ProbePoked("p-1", observe), defer=True)
        tasked = publish(ProbePoked("p-2", observe), defer=True)
    finally:
        deferred_event_committed.connect(_enqueue_delivery, dispatch_uid="bsft_saga.tasks.enqueue")

    assert deliver_event(str(tasked.message_id)) == 1
    assert deliver_pending().delivered == 1
    assert calls == [OUTSIDE] * 4
    assert not SagaOutboxMessage.objects.pending().exists()


def test_the_harness_fires_timers_with_no_transaction_open(
    seen: tuple[Seen, str], action: Callable[[Any], str]
) -> None:
    calls, observe = seen
    with SagaHarness() as harness:
        harness.publish(ProbeStarted("p-harness", _poke_in_an_hour(action, observe)))
        harness.advance_time(timedelta(hours=1))
    assert calls == [OUTSIDE, OUTSIDE]


def _kill_own_session() -> None:
    """End this connection's database session from inside it, as a server restart, an
    operator or a proxy would."""
    with connection.cursor() as cursor:
        if connection.vendor == "mysql":
            cursor.execute("SELECT CONNECTION_ID()")
            (session,) = cursor.fetchone()
            cursor.execute(f"KILL CONNECTION {int(session)}")
        else:
            cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")


def test_a_timer_whose_receiver_kills_its_session_is_charged_alone_and_dead_lettered(
    clock: FrozenDateTimeFactory,
) -> None:
    require_server_database()
    keys = [f"inv-{i}" for i in range(5)]
    for key in keys:
        publish(InvoiceSent(key))
    mails: list[str] = []

    def mail(sender: type, *, envelope: Any, **kwargs: Any) -> None:
        if isinstance(envelope.event, InvoiceReminderDue):
            if envelope.event.invoice_id == "inv-2":
                _kill_own_session()
            mails.append(envelope.event.invoice_id)

    event_published.connect(mail, weak=False, dispatch_uid="tests.dispatch.killer")
    try:
        with override_settings(BSFT_SAGA={"DELIVERY": {"MAX_DISPATCH_ATTEMPTS": 3}}):
            reports = [drain_due()]
            for _ in range(3):  # each retry after its back-off
                clock.tick(timedelta(hours=2))
                reports.append(drain_due())
    finally:
        event_published.disconnect(dispatch_uid="tests.dispatch.killer")

    assert [(r.fired, r.failed, r.dead_lettered) for r in reports] == [
        (4, 1, 0),  # the batch-mates fire; the killer is charged
        (0, 1, 0),  # claimed alone, charged again
        (0, 0, 1),  # the third attempt is the last
        (0, 0, 0),
    ]
    assert sorted(mails) == ["inv-0", "inv-1", "inv-3", "inv-4"]  # each once
    poison = SagaTimeout.objects.get(saga__correlation_key="inv-2")
    assert (poison.outcome, poison.attempts) == (TimeoutOutcome.DEAD_LETTERED, 3)
    assert poison.last_error.startswith(CONNECTION_LOST)
    reminded = dict(
        SagaInstance.objects.filter(saga_type=InvoiceFlow.saga_type).values_list(
            "correlation_key", "state__reminded"
        )
    )
    assert reminded == {"inv-0": 1, "inv-1": 1, "inv-2": 0, "inv-3": 1, "inv-4": 1}


# --- real dispatcher processes (PostgreSQL, MariaDB) -----------------------------------


def _invoices(n: int) -> list[str]:
    keys = [f"inv-{i:02d}" for i in range(n)]
    for key in keys:
        publish(InvoiceSent(key))
    return keys


def _mails(log: Path) -> list[str]:
    if not log.exists():
        return []
    lines = [line.split() for line in log.read_text().splitlines()]
    assert all(in_transaction == "0" for _key, in_transaction in lines), lines
    return [key for key, _in_transaction in lines]


def _wait_for_mails(log: Path, count: int, child: Child, timeout: float) -> list[str]:
    deadline = time.monotonic() + timeout
    while len(mails := _mails(log)) < count:
        if child.process.poll() is not None:
            raise AssertionError(f"{child.name} ended early\n{child.stderr()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(mails)} of {count} mails in {timeout}s\n{child.stderr()}")
        time.sleep(0.01)
    return mails


def _dispatcher(children: Supervisor, log: Path, mail_seconds: float, name: str) -> Child:
    return children.spawn(
        "mail_drain.py",
        "--mail-log",
        str(log),
        "--mail-seconds",
        str(mail_seconds),
        "--max-seconds",
        "90",
        name=name,
    )


def _reminded() -> Counter[str]:
    rows = SagaInstance.objects.filter(saga_type=InvoiceFlow.saga_type)
    return Counter({key: n for key, n in rows.values_list("correlation_key", "state__reminded")})


@pytest.mark.slow
def test_a_payment_right_after_a_slow_reminder_mail_is_applied(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    require_server_database()
    keys = _invoices(20)
    log = tmp_path / "mails.log"

    with supervised(subprocess_env, tmp_path) as children:
        dispatcher = _dispatcher(children, log, 0.25, "dispatcher")
        [first] = _wait_for_mails(log, 1, dispatcher, timeout=60)
        time.sleep(1.0)
        publish(InvoicePaid(first))  # while the rest of the batch is still mailing
        dispatcher.report(timeout=60)

    saga = SagaInstance.objects.get(saga_type=InvoiceFlow.saga_type, correlation_key=first)
    assert saga.state == {"reminded": 1, "paid": True}
    assert saga.step_index == 3
    assert sorted(_mails(log)) == keys
    assert _reminded() == Counter(dict.fromkeys(keys, 1))


@pytest.mark.slow
def test_a_dispatcher_killed_mid_batch_resends_only_its_last_commit_group(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    require_server_database()
    keys = _invoices(40)
    log = tmp_path / "mails.log"
    env = {**subprocess_env, "BSFT_SAGA_DELIVERY_JSON": json.dumps({"CLAIM_LEASE": 2})}

    with supervised(env, tmp_path) as children:
        first = _dispatcher(children, log, 0.05, "first")
        _wait_for_mails(log, 20, first, timeout=60)
        first.process.send_signal(signal.SIGKILL)
        assert first.wait(timeout=10) == -signal.SIGKILL
        # The killed pass's claims run out after the lease; the next dispatcher takes them.
        _dispatcher(children, log, 0.05, "second").report(timeout=90)

    mails = Counter(_mails(log))
    assert set(mails) == set(keys)
    twice = sorted(key for key, n in mails.items() if n > 1)
    assert len(twice) <= 3, twice
    assert max(mails.values()) <= 2
    assert _reminded() == Counter(dict.fromkeys(keys, 1))  # the effect: exactly once
    assert not SagaTimeout.objects.pending().filter(saga__saga_type=InvoiceFlow.saga_type).exists()


def _idle_in_transaction_limit(*, seconds: int) -> tuple[str, str]:
    """The statements that end a session idle in a transaction for ``seconds``, and undo it."""
    if connection.vendor == "mysql":
        return (
            f"SET GLOBAL idle_transaction_timeout = {seconds}",
            "SET GLOBAL idle_transaction_timeout = DEFAULT",
        )
    database = connection.ops.quote_name(connection.settings_dict["NAME"])
    return (
        f"ALTER DATABASE {database} SET idle_in_transaction_session_timeout = '{seconds}s'",
        f"ALTER DATABASE {database} RESET idle_in_transaction_session_timeout",
    )


@pytest.mark.slow
def test_slow_receivers_fire_under_an_idle_in_transaction_timeout(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    require_server_database()
    keys = _invoices(3)
    log = tmp_path / "mails.log"
    # As docs/operations/postgresql.md recommends, only shorter; MariaDB's own timeout is
    # server-wide (sessions that start after it take it: the dispatcher's).
    cut_idle, uncut_idle = _idle_in_transaction_limit(seconds=1)
    with connection.cursor() as cursor:
        cursor.execute(cut_idle)
    try:
        with supervised(subprocess_env, tmp_path) as children:
            # Bounded: a pass that looped on the timeout for ever would never report.
            report = _dispatcher(children, log, 1.5, "dispatcher").report(timeout=60)
    finally:
        with connection.cursor() as cursor:
            cursor.execute(uncut_idle)

    assert (report["fired"], report["failed"]) == (3, 0)
    assert sorted(_mails(log)) == keys  # three mails in all
    assert _reminded() == Counter(dict.fromkeys(keys, 1))


def test_a_timer_whose_saga_moved_on_while_its_receivers_ran_is_delivered_again(
    clock: FrozenDateTimeFactory, action: Callable[[Any], str]
) -> None:
    envelopes: list[Any] = []

    def overtake(sender: type, *, envelope: Any, **kwargs: Any) -> None:
        if isinstance(envelope.event, ProbePoked) and envelope.timer is not None:
            envelopes.append(envelope)
            if len(envelopes) == 1:  # a publisher advances the saga meanwhile, and commits
                publish(ProbePoked("p-race"))

    timer_action = action(lambda ctx, e: None)
    saga_timer = action(  # saga-scoped: the publisher's step, ending the wait, keeps it
        lambda ctx, e: ctx.schedule_timeout(
            "poke", timedelta(hours=1), ProbePoked(e.probe_id, timer_action), scope="saga"
        )
    )
    publish(ProbeStarted("p-race", saga_timer))
    clock.tick(timedelta(hours=1))
    event_published.connect(overtake, weak=False, dispatch_uid="tests.dispatch.overtake")
    try:
        report = drain_due()
    finally:
        event_published.disconnect(dispatch_uid="tests.dispatch.overtake")

    # The timer's step, planned before the publisher's commit, lost its version check: the
    # pass delivered the timer again, and it applied once, after the publisher's step.
    assert report.fired == 1
    assert [e.message_id for e in envelopes] == [envelopes[0].message_id] * 2
    saga = SagaInstance.objects.get(saga_type=ProbeFlow.saga_type, correlation_key="p-race")
    assert saga.state["actions"][1:] == ["-", timer_action]  # "-": the publisher's
    assert SagaTimeout.objects.get(saga=saga, name="poke").outcome == TimeoutOutcome.FIRED
