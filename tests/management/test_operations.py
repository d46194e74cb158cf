"""Maintenance services (requeue, purge), the flow graph renderer, and the operations pages
(docs/operations.md and the how-to pages of docs/operations/)."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import get_commands, load_command_class
from django.db import connection
from django.test.utils import CaptureQueriesContext
from freezegun import freeze_time

from bsft_saga import clock, publish
from bsft_saga.flows.graph import render, render_dot, render_mermaid
from bsft_saga.flows.registry import flow_registry
from bsft_saga.models import SagaInstance, SagaTimeout, TimeoutOutcome
from bsft_saga.retention import purge_timeouts as purge
from bsft_saga.timeouts import drain_due
from bsft_saga.timeouts.channel import TimerChannel
from bsft_saga.timeouts.maintenance import RequeueReport, requeue_dead_lettered
from tests.support.services import in_ci
from tests.testapp.ops_events import ReminderRequested
from tests.testapp.ops_flows import (
    REMINDER_SAGA_TYPE,
    REMINDER_TIMER,
    ApprovalFlow,
    QuoteFollowUpFlow,
    ReminderFlow,
    make_saga,
    make_timer,
)

pytestmark = pytest.mark.django_db

_DOCS = Path(__file__).resolve().parents[2] / "docs"
DOCS = [_DOCS / "operations.md", *sorted((_DOCS / "operations").glob("*.md"))]
DEAD = TimeoutOutcome.DEAD_LETTERED


def _pending(row: SagaTimeout) -> bool:
    return SagaTimeout.objects.get(pk=row.pk).dispatched_at is None


# -- requeue_dead_lettered ----------------------------------------------------------------------


def test_requeue_returns_a_dead_letter_to_the_pending_set() -> None:
    row = make_timer(make_saga(), outcome=DEAD, attempts=10, reason="UnknownEventType: gone")
    SagaTimeout.objects.filter(pk=row.pk).update(claimed_until=clock.now())

    result = requeue_dead_lettered([row.pk])

    assert result == RequeueReport(requeued=1, refused=[])
    row.refresh_from_db()
    assert (row.dispatched_at, row.outcome, row.dead_lettered_at) == (None, None, None)
    assert (row.dead_letter_reason, row.attempts) == ("", 0)
    assert (row.claim_token, row.claimed_until) == (None, None)
    assert row.last_error == "UnknownEventType: gone"


def test_a_requeued_timer_fires_at_the_next_drain() -> None:
    publish(ReminderRequested("requeue-fires", delay_seconds=0))
    saga = SagaInstance.objects.get(saga_type=REMINDER_SAGA_TYPE, correlation_key="requeue-fires")
    now = clock.now()
    SagaTimeout.objects.filter(saga=saga).update(
        dispatched_at=now, outcome=DEAD, dead_lettered_at=now, dead_letter_reason="boom"
    )
    timer = SagaTimeout.objects.get(saga=saga)

    requeue_dead_lettered([timer.pk])
    report = drain_due()

    assert report.fired == 1
    saga.refresh_from_db()
    assert saga.is_complete
    assert saga.state == {"reminded": True}


def test_requeue_refuses_a_name_that_a_pending_timer_of_the_saga_holds() -> None:
    saga = make_saga("twin")
    dead = make_timer(saga, outcome=DEAD)
    pending = make_timer(saga)

    result = requeue_dead_lettered([dead.pk])

    assert result.requeued == 0
    [(refused_id, reason)] = result.refused
    assert refused_id == dead.pk
    assert REMINDER_SAGA_TYPE in reason
    assert "[twin]" in reason
    assert repr(REMINDER_TIMER) in reason
    assert f"(id {pending.pk})" in reason
    assert not _pending(dead)


def test_requeue_refuses_rows_that_are_not_dead_lettered() -> None:
    saga = make_saga()
    fired = make_timer(saga, "fired", outcome=TimeoutOutcome.FIRED)
    pending = make_timer(saga, "pending")

    result = requeue_dead_lettered([fired.pk, pending.pk])

    assert result.requeued == 0
    reasons = dict(result.refused)
    assert "not dead-lettered (fired)" in reasons[fired.pk]
    assert "not dead-lettered (ready)" in reasons[pending.pk]
    assert SagaTimeout.objects.get(pk=fired.pk).outcome == TimeoutOutcome.FIRED


def test_requeue_refuses_ids_that_do_not_exist() -> None:
    result = requeue_dead_lettered([987654321])

    assert result == RequeueReport(
        requeued=0, refused=[(987654321, "timer 987654321 does not exist")]
    )


def test_requeue_refuses_a_timer_of_a_completed_saga() -> None:
    row = make_timer(make_saga(complete=True), outcome=DEAD)

    result = requeue_dead_lettered([row.pk])

    assert result.requeued == 0
    assert "completed saga" in result.refused[0][1]
    assert not _pending(row)


def test_requeue_without_ids_takes_every_dead_letter_and_nothing_else() -> None:
    dead = [make_timer(make_saga(f"all-{n}"), outcome=DEAD) for n in range(3)]
    fired = make_timer(make_saga("fired"), outcome=TimeoutOutcome.FIRED)

    result = requeue_dead_lettered()

    assert result == RequeueReport(requeued=3, refused=[])
    assert all(_pending(row) for row in dead)
    assert not _pending(fired)


def test_one_refusal_does_not_undo_the_other_requeues() -> None:
    good = make_timer(make_saga("good"), outcome=DEAD)
    twin_saga = make_saga("refused")
    refused = make_timer(twin_saga, outcome=DEAD)
    make_timer(twin_saga)

    result = requeue_dead_lettered([refused.pk, good.pk, good.pk])

    assert result.requeued == 1
    assert [pk for pk, _ in result.refused] == [refused.pk]
    assert _pending(good)


def test_requeue_losing_a_race_with_a_schedule_is_a_refusal(monkeypatch: Any) -> None:
    saga = make_saga("race")
    dead = make_timer(saga, outcome=DEAD)
    pending = make_timer(saga)
    real_check = TimerChannel.requeue_refusal
    calls: list[int] = []

    def check_before_the_schedule_landed(
        channel: TimerChannel, row: SagaTimeout, user: Any
    ) -> str | None:
        calls.append(row.pk)
        return None if len(calls) == 1 else real_check(channel, row, user)

    monkeypatch.setattr(TimerChannel, "requeue_refusal", check_before_the_schedule_landed)

    result = requeue_dead_lettered([dead.pk])

    assert result.requeued == 0
    assert f"(id {pending.pk})" in result.refused[0][1]
    assert not _pending(dead)
    assert _pending(pending)


# -- purge --------------------------------------------------------------------------------------


@pytest.fixture
def history() -> dict[str, SagaTimeout]:
    """One row of each outcome retired 40 days ago, a fired row of 10 days, a pending row."""
    now = clock.now()
    old = now - timedelta(days=40)
    saga = make_saga("history")
    rows = {
        outcome: make_timer(saga, f"old-{outcome}", outcome=outcome, dispatched_at=old)
        for outcome in TimeoutOutcome.values
    }
    rows["recent"] = make_timer(
        saga, "recent", outcome=TimeoutOutcome.FIRED, dispatched_at=now - timedelta(days=10)
    )
    rows["pending"] = make_timer(saga, "pending", due_at=old)
    return rows


def _left() -> set[str]:
    return set(SagaTimeout.objects.values_list("name", flat=True))


def test_purge_deletes_every_outcome_retired_before_the_window(
    history: dict[str, SagaTimeout],
) -> None:
    assert purge(timedelta(days=30)) == 4
    assert _left() == {"recent", "pending"}


def test_purge_can_keep_the_dead_letters(history: dict[str, SagaTimeout]) -> None:
    assert purge(timedelta(days=30), keep_dead_lettered=True) == 3
    assert _left() == {"old-dead_lettered", "recent", "pending"}


def test_purge_dry_run_counts_and_deletes_nothing(history: dict[str, SagaTimeout]) -> None:
    assert purge(timedelta(days=30), dry_run=True) == 4
    assert purge(timedelta(days=5), dry_run=True, keep_dead_lettered=True) == 4
    assert len(_left()) == 6


def test_purge_never_touches_pending_rows(history: dict[str, SagaTimeout]) -> None:
    purge(timedelta(0), now=clock.now() + timedelta(days=365))
    assert _left() == {"pending"}


def test_purge_measures_the_window_from_the_clock(history: dict[str, SagaTimeout]) -> None:
    with freeze_time(clock.now() + timedelta(days=25)):
        assert purge(timedelta(days=30)) == 5
    assert _left() == {"pending"}


def test_purge_deletes_in_batches_of_ids() -> None:
    saga = make_saga("batches")
    old = clock.now() - timedelta(days=2)
    for number in range(5):
        make_timer(saga, f"t{number}", outcome=TimeoutOutcome.FIRED, dispatched_at=old)

    with CaptureQueriesContext(connection) as queries:
        deleted = purge(timedelta(days=1), batch_size=2)

    assert deleted == 5
    deletes = [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith("DELETE")]
    assert len(deletes) == 3
    assert not SagaTimeout.objects.exists()


def test_purge_rejects_a_negative_window_and_an_empty_batch() -> None:
    with pytest.raises(ValueError, match="negative"):
        purge(timedelta(days=-1))
    with pytest.raises(ValueError, match="batch_size"):
        purge(timedelta(days=1), batch_size=0)


# -- graph --------------------------------------------------------------------------------------


def test_mermaid_draws_steps_as_states_and_events_as_transitions() -> None:
    text = render_mermaid(flow_registry.get(QuoteFollowUpFlow))
    lines = [line.strip() for line in text.splitlines()]

    assert lines[0] == "stateDiagram-v2"
    assert 'state "quotes.follow-up" as saga1 {' in lines
    assert "[*] --> saga1_step0 : QuoteSent" in lines
    assert "saga1_step0 --> saga1_step1 : QuoteFollowUpDue" in lines
    assert "saga1_step1 --> saga1_step2 : QuoteAccepted" in lines
    assert "saga1_step1 --> saga1_step2 : QuoteWithdrawn" in lines
    assert "saga1_step2 : 2 wait_for QuoteAccepted or QuoteWithdrawn" in lines
    assert "saga1_step0 : then schedule_follow_up" in lines


def test_mermaid_ends_a_complete_flow_in_a_final_state_and_notes_its_deadline() -> None:
    lines = [s.strip() for s in render_mermaid(flow_registry.get(QuoteFollowUpFlow)).splitlines()]

    assert "saga1_step2 --> [*]" in lines
    assert "note right of saga1 : deadline start + 14d, on expiry expire_quote" in lines


def test_a_flow_without_auto_completion_has_no_final_state() -> None:
    mermaid = render_mermaid(flow_registry.get(ApprovalFlow))
    dot = render_dot(flow_registry.get(ApprovalFlow))

    assert "--> [*]" not in mermaid
    assert "saga1_step1 : when is_urgent then finish" in mermaid
    assert "saga1_step1 : then lambda" in mermaid
    assert "_end" not in dot
    assert "note" not in mermaid


def test_dot_draws_the_same_graph() -> None:
    text = render_dot(flow_registry.get(QuoteFollowUpFlow))
    lines = [line.strip() for line in text.splitlines()]

    assert lines[0] == 'digraph "quotes.follow-up" {'
    assert lines[-1] == "}"
    assert 'saga1_start -> saga1_step0 [label="QuoteSent"];' in lines
    assert 'saga1_step1 -> saga1_step2 [label="QuoteWithdrawn"];' in lines
    assert "saga1_step2 -> saga1_end;" in lines
    assert (
        'saga1_deadline [shape=note, label="deadline start + 14d, on expiry expire_quote"];'
        in lines
    )


def test_quotes_and_newlines_in_a_saga_type_cannot_break_the_documents() -> None:
    definition = flow_registry.get(ReminderFlow)
    odd = type(definition)(
        saga_type='odd "type"\nx',
        flow_name=definition.flow_name,
        state_class=definition.state_class,
        steps=definition.steps,
        auto_complete=True,
    )

    assert 'digraph "odd \\"type\\"\\nx" {' in render_dot(odd)
    assert "state \"odd 'type' x\" as saga1 {" in render_mermaid(odd)


def test_several_flows_make_one_document_with_distinct_ids() -> None:
    definitions = [flow_registry.get(QuoteFollowUpFlow), flow_registry.get(ApprovalFlow)]

    mermaid = render(definitions, "mermaid")
    dot = render(definitions, "dot")

    assert mermaid.count("stateDiagram-v2") == 1
    assert 'state "tests.ops.approval" as saga2 {' in mermaid
    assert dot.startswith('digraph "sagas" {')
    assert dot.count("digraph") == 1
    assert "subgraph cluster_saga2 {" in dot


def test_graphviz_accepts_the_dot_output() -> None:
    if shutil.which("dot") is None:
        reason = "Graphviz `dot` is not installed"
        if in_ci():
            pytest.fail(f"{reason}; CI requires it (.ci/run installs Debian's graphviz)")
        pytest.skip(f"{reason}; install it (apt-get install graphviz) or set CI=true to fail")
    document = render(sorted(flow_registry.all(), key=lambda d: d.saga_type), "dot")
    result = subprocess.run(
        ["dot", "-Tsvg"], input=document, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "<svg" in result.stdout


# -- docs/operations.md, docs/operations/*.md --------------------------------------------------


def _blocks(language: str) -> list[str]:
    return [block for page in DOCS for block in _page_blocks(page, language)]


def _page_blocks(page: Path, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", page.read_text(), flags=re.S | re.M)


def test_docs_python_examples_run() -> None:
    assert _blocks("python")
    for page in DOCS:
        for block in _page_blocks(page, "python"):
            exec(compile(block, str(page), "exec"), {"__name__": "docs_operations"})


def test_docs_shell_examples_use_real_commands_and_options() -> None:
    commands = get_commands()
    lines = [
        line.strip()
        for block in _blocks("console")
        for line in block.splitlines()
        if line.strip().startswith("$ python manage.py ")
    ]
    assert len(lines) >= 6
    for line in lines:
        # The command's own arguments: up to a pipe or a redirection of its output.
        argv = shlex.split(re.split(r"[|>]", line)[0].removeprefix("$ python manage.py "))
        command = load_command_class(commands[argv[0]], argv[0])
        parser = command.create_parser("manage.py", argv[0])
        parser.parse_args(argv[1:])  # raises CommandError on an unknown option


def test_docs_graph_example_is_what_saga_graph_prints() -> None:
    [example] = _blocks("mermaid")
    definition = flow_registry.get("quotes.follow-up")
    printed = render_mermaid(definition).replace(
        definition.flow_name, "orders.flows.QuoteFollowUpFlow"
    )
    assert example.rstrip("\n") == printed
