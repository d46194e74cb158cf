"""The flow's picture (``bsft_saga.flows.picture``): an SVG drawn without Graphviz, marked
with one instance's progress, its text escaped, sized to its content."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path
from typing import Any

from django.core.management import call_command
from django.utils import timezone

from bsft_saga import event
from bsft_saga.flows import FlowDefinition, SagaBuilderFactory
from bsft_saga.flows.picture import MAX_TIMERS_PER_STEP, PendingTimer, flow_svg
from bsft_saga.flows.registry import flow_registry
from tests.testapp.branch_events import NoteAdded, OrderAccepted
from tests.testapp.branch_flows import DunningFlow, FulfilmentFlow
from tests.testapp.ops_flows import ApprovalFlow, NudgeFlow, QuoteFollowUpFlow

SVG = "{http://www.w3.org/2000/svg}"
ROOT = Path(__file__).resolve().parents[2]
HOSTILE = "<script>alert(1)</script><img src=x onerror=alert(1)>&amp;"
DUE = datetime(2026, 5, 1, 10, 0, 30, tzinfo=UTC)


@event("tests.picture.hostile")
@dataclass(frozen=True)
class HostileEvent:
    order_id: str


# Event and function names come from user code: a class or function can carry any name.
HostileEvent.__name__ = HOSTILE


def _hostile_body(ctx: Any, e: Any) -> None:
    pass


_hostile_body.__name__ = HOSTILE


def _hostile_flow() -> FlowDefinition:
    factory = SagaBuilderFactory(flow_name="tests.HostileFlow", saga_type=HOSTILE)
    (
        factory.stateless()
        .with_deadline(timedelta(days=1), on_expired=_hostile_body)
        .start_with(OrderAccepted, key=lambda e: e.order_id)
        .then(_hostile_body)
        .wait_for(HostileEvent, key=lambda e: e.order_id, keep_early=True)
        .when(_hostile_body, _hostile_body)
        .meanwhile(NoteAdded, _hostile_body, key=lambda e: e.order_id)
        .build()
    )
    return factory.result()


def _parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    return root


def _classes(element: ET.Element) -> set[str]:
    return set(element.get("class", "").split())


def _groups(root: ET.Element, cls: str) -> list[ET.Element]:
    return [g for g in root.iter(f"{SVG}g") if cls in _classes(g)]


def _steps(root: ET.Element) -> dict[int, ET.Element]:
    return {int(g.get("data-step", "-1")): g for g in _groups(root, "step")}


def _text(element: ET.Element) -> str:
    """The drawn text of ``element``: its ``<text>`` lines, one per line."""
    return "\n".join("".join(t.itertext()) for t in element.iter(f"{SVG}text"))


def _final(root: ET.Element) -> ET.Element:
    (final,) = _groups(root, "final")
    return final


def _fulfilment() -> FlowDefinition:
    return flow_registry.get(FulfilmentFlow)


# -- the flow as declared -------------------------------------------------------------------------


def test_the_picture_parses_as_svg_with_one_box_per_step_in_order() -> None:
    root = _parse(flow_svg(_fulfilment()))

    steps = _steps(root)
    assert list(steps) == [0, 1, 2, 3]
    assert "step 0 · start_with" in _text(steps[0])
    assert "step 3 · wait_for" in _text(steps[3])
    assert all("data-status" not in g.attrib for g in steps.values())


def test_each_edge_names_the_events_that_wake_the_step_below_it() -> None:
    edges = [_text(g) for g in _groups(_parse(flow_svg(_fulfilment())), "edge")]

    assert edges == [
        "OrderAccepted",
        "PaymentAuthorised",
        "ParcelPacked (kept if early)\nOrderWithdrawn (kept if early)",
        "ParcelDelivered",
        "",  # the last step to the final state
    ]


def test_a_box_names_the_bodies_and_the_meanwhile_handlers_of_its_step() -> None:
    steps = _steps(_parse(flow_svg(flow_registry.get(DunningFlow))))

    assert _text(steps[0]).splitlines()[1:] == ["then _schedule_reminder"]
    assert _text(steps[1]).splitlines()[1:] == [
        "then lambda",
        "meanwhile PaymentReminderDue: _remind",
    ]


def test_a_complete_flow_ends_in_a_final_state_and_a_built_one_in_mark_complete() -> None:
    completes = _parse(flow_svg(_fulfilment()))
    builds = _parse(flow_svg(flow_registry.get(ApprovalFlow)))

    assert _text(_final(completes)) == "complete"
    assert "dashed" not in _classes(_groups(completes, "edge")[-1])
    last_edge = _groups(builds, "edge")[-1]
    assert "dashed" in _classes(last_edge)
    assert _text(last_edge) == "when a step calls ctx.mark_complete()"


def test_a_deadline_is_a_note_under_the_title() -> None:
    root = _parse(flow_svg(flow_registry.get(QuoteFollowUpFlow)))

    (note,) = _groups(root, "deadline")
    assert _text(note) == "deadline start + 14d, on expiry expire_quote"
    assert "expired" not in _classes(note)


def test_the_picture_has_an_accessible_name() -> None:
    root = _parse(flow_svg(_fulfilment(), step_index=2))

    assert root.get("role") == "img"
    assert root[0].tag == f"{SVG}title"
    label = (
        "Flow tests.fulfilment, 4 steps; waiting at step 2 (wait_for ParcelPacked | OrderWithdrawn)"
    )
    assert root.get("aria-label") == root[0].text == label


def test_the_picture_is_sized_to_its_content() -> None:
    short = _parse(flow_svg(_fulfilment()))
    long = _parse(flow_svg(_fulfilment(), pending_timers=[PendingTimer("t" * 70, 1, DUE)]))

    for root in (short, long):
        x, y, width, height = (float(v) for v in root.get("viewBox", "").split())
        assert (x, y) == (0, 0)
        assert (root.get("width"), root.get("height")) == (f"{width:g}", f"{height:g}")
        for rect in root.iter(f"{SVG}rect"):
            assert float(rect.get("x", 0)) + float(rect.get("width", 0)) <= width
            assert float(rect.get("y", 0)) + float(rect.get("height", 0)) <= height
    assert float(long.get("width", 0)) > float(short.get("width", 0))
    assert float(long.get("height", 0)) > float(short.get("height", 0))


def test_the_same_arguments_draw_the_same_text() -> None:
    def draw() -> str:
        return flow_svg(_fulfilment(), step_index=2, pending_timers=[PendingTimer("a", 2, DUE)])

    assert draw() == draw()


def test_the_colours_follow_the_admin_theme() -> None:
    svg = flow_svg(_fulfilment(), step_index=1)

    assert "var(--body-fg" in svg
    assert "var(--selected-row" in svg
    assert "currentColor" in svg
    # The style rules stay inside the picture: an inline SVG's <style> applies to the page.
    style = _parse(svg).find(f"{SVG}style")
    assert style is not None
    assert style.text is not None
    rules = [line for line in style.text.splitlines() if "{" in line]
    assert rules
    assert all(rule.startswith(".bsft-saga-flow") for rule in rules)


# -- an instance's progress -----------------------------------------------------------------------


def test_the_step_an_instance_waits_at_is_highlighted_and_the_ones_before_are_done() -> None:
    root = _parse(flow_svg(_fulfilment(), step_index=2))

    statuses = {i: g.get("data-status") for i, g in _steps(root).items()}
    assert statuses == {0: "done", 1: "done", 2: "current", 3: "ahead"}
    current = _steps(root)[2]
    assert "step-current" in _classes(current)
    assert "waiting here" in _text(current)
    assert "✓ done" in _text(_steps(root)[0])
    (awaited,) = _groups(root, "edge-awaited")
    assert _text(awaited) == "ParcelPacked (kept if early)\nOrderWithdrawn (kept if early)"
    assert _text(_final(root)) == "complete"


def test_a_completed_instance_reaches_the_final_state() -> None:
    root = _parse(flow_svg(_fulfilment(), step_index=4, completed=True))

    assert {g.get("data-status") for g in _steps(root).values()} == {"done"}
    assert not _groups(root, "step-current")
    assert "final-reached" in _classes(_final(root))
    assert _text(_final(root)) == "✓ complete"


def test_an_instance_completed_by_a_step_leaves_the_later_steps_unreached() -> None:
    # OrderWithdrawn at step 2 calls ctx.mark_complete(): the saga moved on to 3, and ended.
    root = _parse(flow_svg(_fulfilment(), step_index=3, completed=True))

    assert _steps(root)[3].get("data-status") == "ahead"
    assert "final-reached" in _classes(_final(root))


def test_a_terminated_instance_stopped_at_its_step_and_ends_terminated() -> None:
    root = _parse(flow_svg(_fulfilment(), step_index=2, completed=True, terminated=True))

    stopped = _steps(root)[2]
    assert stopped.get("data-status") == "stopped"
    assert "stopped here" in _text(stopped)
    assert "final-terminated" in _classes(_final(root))
    assert _text(_final(root)) == "✕ terminated"
    assert "terminated at step 2" in root.get("aria-label", "")


def test_an_expired_deadline_is_marked_on_the_note_with_the_instances_deadline() -> None:
    with timezone.override("Europe/Berlin"):
        svg = flow_svg(
            flow_registry.get(QuoteFollowUpFlow),
            step_index=1,
            completed=True,
            expired=True,
            deadline_at=DUE,
        )
    root = _parse(svg)

    (note,) = _groups(root, "deadline")
    assert "expired" in _classes(note)
    assert _text(note) == (
        "deadline start + 14d, on expiry expire_quote\n"
        "deadline at 2026-05-01 12:00:30 CEST · expired"
    )
    assert _steps(root)[1].get("data-status") == "stopped"


def test_pending_timers_are_listed_by_name_and_due_time_in_the_box_of_their_wait() -> None:
    timers = [PendingTimer("remind", 1, DUE), PendingTimer("escalate", 2, None)]
    steps = _steps(_parse(flow_svg(flow_registry.get(QuoteFollowUpFlow), pending_timers=timers)))

    assert "timer remind · due 2026-05-01 10:00:30 UTC" in _text(steps[1]).splitlines()
    assert "timer escalate" in _text(steps[2]).splitlines()
    assert "timer" not in _text(steps[0])


def test_a_date_that_cannot_be_read_is_shown_as_its_text() -> None:
    timer = PendingTimer("remind", 1, "unreadable, stored as 10000-01-01 00:00:00+00")
    steps = _steps(_parse(flow_svg(flow_registry.get(QuoteFollowUpFlow), pending_timers=[timer])))

    assert "timer remind · due unreadable, stored as 10000-01-01 00:00:00+00" in _text(steps[1])


def test_a_box_lists_a_bounded_number_of_timers_and_counts_the_rest() -> None:
    timers = [PendingTimer(f"t{n:02}", 1, DUE) for n in range(MAX_TIMERS_PER_STEP + 3)]
    lines = _text(_steps(_parse(flow_svg(_fulfilment(), pending_timers=timers)))[1]).splitlines()

    assert sum(line.startswith("timer ") for line in lines) == MAX_TIMERS_PER_STEP
    assert lines[-1] == "and 3 more pending timers"


def test_an_instance_past_its_last_step_waits_at_the_final_state_with_its_timers() -> None:
    # NudgeFlow has one step and no auto-completion: its instances stay at step_index 1.
    root = _parse(
        flow_svg(
            flow_registry.get(NudgeFlow), step_index=1, pending_timers=[PendingTimer("nudge", 1)]
        )
    )

    assert _steps(root)[0].get("data-status") == "done"
    final = _final(root)
    assert "final-current" in _classes(final)
    assert _text(final) == "every step handled, not complete\ntimer nudge"


# -- hostile text ---------------------------------------------------------------------------------


def test_names_from_user_code_are_escaped_and_inert() -> None:
    svg = flow_svg(
        _hostile_flow(),
        step_index=1,
        pending_timers=[PendingTimer(HOSTILE, 1, HOSTILE)],
        deadline_at=HOSTILE,
    )
    root = _parse(svg)

    assert "<script" not in svg
    assert "<img" not in svg
    assert {element.tag for element in root.iter()} <= {
        f"{SVG}{tag}" for tag in ("svg", "title", "style", "g", "text", "rect", "circle")
    } | {f"{SVG}line", f"{SVG}path"}
    assert not any(name.startswith("on") for e in root.iter() for name in e.attrib)
    drawn = _text(root)
    # Cut to fit, but drawn as the text it is: the saga type, the event, bodies, the timer.
    assert HOSTILE in root.get("aria-label", "")
    assert f"{HOSTILE} (kept if early)" in drawn
    assert f"then {HOSTILE}" in drawn
    assert f"meanwhile NoteAdded: {HOSTILE}" in drawn
    assert f"timer {HOSTILE} · due" in drawn


def test_control_characters_and_long_names_still_give_well_formed_svg() -> None:
    factory = SagaBuilderFactory(flow_name="tests.Odd", saga_type="odd\x00\x1b\ud800\n" + "x" * 300)
    factory.stateless().start_with(OrderAccepted, key=lambda e: e.order_id).complete()

    root = _parse(flow_svg(factory.result()))

    (title,) = [t for t in root.iter(f"{SVG}text") if "flow-title" in _classes(t)]
    assert title.text is not None
    assert title.text.startswith("odd\ufffd\ufffd\ufffd ")
    assert title.text.endswith("…")
    assert len(title.text) == 80


# -- every flow we ship, and saga_graph --format svg ----------------------------------------------


def test_every_installed_flow_and_version_draws_at_its_first_middle_and_last_steps() -> None:
    for saga_type in sorted(d.saga_type for d in flow_registry.all()):
        for definition in flow_registry.versions(saga_type):
            steps = len(definition.steps)
            for index in sorted({0, 1, steps // 2, steps - 1, steps}):
                root = _parse(flow_svg(definition, step_index=index))
                assert len(_steps(root)) == len(definition.steps), definition.saga_type


def test_saga_graph_prints_svg_one_column_per_version() -> None:
    out = StringIO()
    call_command("saga_graph", "tests.parcel", "--format", "svg", stdout=out)

    root = _parse(out.getvalue())
    flows = [g for g in root if g.tag == f"{SVG}g" and "flow" in _classes(g)]
    assert [_text(g).splitlines()[0] for g in flows] == ["tests.parcel v1", "tests.parcel v2"]


def test_the_sample_projects_flows_draw_as_svg() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BSFT_SAGA_", "DJANGO_"))}
    env.update(DJANGO_SETTINGS_MODULE="sample_project.settings", PYTHONPATH=str(ROOT))
    result = subprocess.run(
        [sys.executable, "manage.py", "saga_graph", "--format", "svg"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    root = _parse(result.stdout)
    titles = {_text(g).splitlines()[0] for g in root if "flow" in _classes(g)}
    assert titles == {"quotes.follow-up", "orders.fulfilment"}
