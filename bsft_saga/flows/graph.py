"""Render flow definitions as diagrams: Mermaid ``stateDiagram-v2``, Graphviz dot, or SVG.

Used by ``manage.py saga_graph``. A diagram shows what the builder declared: each step is a
state (described by its awaited events and its bodies), each transition is labelled with
the event class that wakes the next step, a ``complete()`` flow ends in a final state, and
a ``with_deadline`` budget is a note on the flow. A ``meanwhile`` is a loop on the step whose
wait it runs during (the box the SVG picture lists it in). Timers are scheduled inside step bodies,
so they are not visible statically and do not appear.

Each flow is drawn inside a box titled with its ``saga_type`` (a composite state in Mermaid,
a cluster in dot), so several flows concatenate into one valid document. A flow drawn with
its earlier versions (``previous_versions``), or whose version is not 1, has one box per
version, titled ``"<saga_type> v<version>"``. SVG is drawn by :mod:`bsft_saga.flows.picture`,
each flow a column of boxes, side by side.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from bsft_saga.flows.definition import (
    FlowDefinition,
    Meanwhile,
    StepBody,
    StepDefinition,
    Trigger,
)
from bsft_saga.flows.describe import duration, titled
from bsft_saga.flows.picture import flows_svg

__all__ = ["FORMATS", "render", "render_dot", "render_mermaid"]

FORMATS = ("mermaid", "dot", "svg")

_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]+")


def render_mermaid(definition: FlowDefinition) -> str:
    """One flow as a Mermaid ``stateDiagram-v2`` document (no trailing newline)."""
    return render([definition], "mermaid")


def render_dot(definition: FlowDefinition) -> str:
    """One flow as a Graphviz ``digraph`` named after its saga type (no trailing newline)."""
    return render([definition], "dot")


def render(definitions: Sequence[FlowDefinition], fmt: str) -> str:
    """Several flows, or versions of one, as one document in ``fmt`` (``"mermaid"``,
    ``"dot"``, ``"svg"``)."""
    if fmt == "mermaid":
        lines = ["stateDiagram-v2"]
        for number, (definition, title) in enumerate(titled(definitions), start=1):
            lines += _mermaid_flow(definition, f"saga{number}", title)
        return "\n".join(lines)
    if fmt == "dot":
        saga_types = {d.saga_type for d in definitions}
        title = saga_types.pop() if len(saga_types) == 1 else "sagas"
        lines = [
            f"digraph {_dot_quote(title)} {{",
            "    rankdir=LR;",
            '    node [shape=box, style=rounded, fontname="Helvetica"];',
            '    edge [fontname="Helvetica"];',
        ]
        for number, (definition, title) in enumerate(titled(definitions), start=1):
            lines += _dot_flow(definition, f"saga{number}", title)
        lines.append("}")
        return "\n".join(lines)
    if fmt == "svg":
        return flows_svg(definitions)
    raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")


# -- shared descriptions ------------------------------------------------------------------------


def _name(func: Any) -> str:
    name = getattr(func, "__name__", None) or type(func).__name__
    return "lambda" if name == "<lambda>" else _UNSAFE.sub("_", name)


def _body_line(body: StepBody) -> str:
    if body.guard is None:
        return f"then {_name(body.run)}"
    condition = f"not {_name(body.guard)}" if body.negate else _name(body.guard)
    return f"when {condition} then {_name(body.run)}"


def _step_lines(step: StepDefinition) -> list[str]:
    verb = "start_with" if step.index == 0 else "wait_for"
    events = " or ".join(_event_name(t.event_class) for t in step.triggers)
    return [f"{step.index} {verb} {events}", *(_body_line(b) for b in step.bodies)]


def _edge_text(trigger: Trigger) -> str:
    """An awaited event's edge; one that ``keep_early`` keeps says so."""
    name = _event_name(trigger.event_class)
    return f"{name} (kept if early)" if trigger.keep_early else name


def _meanwhile_text(meanwhile: Meanwhile) -> str:
    """A ``meanwhile`` loop on the waiting step: the event, then its body."""
    return f"meanwhile {_event_name(meanwhile.trigger.event_class)}: {_name(meanwhile.body)}"


def _event_name(event_class: type) -> str:
    return _UNSAFE.sub("_", event_class.__name__)


def _deadline_text(definition: FlowDefinition) -> str | None:
    if definition.deadline is None:
        return None
    budget = definition.deadline.budget
    shown = duration(budget) if isinstance(budget, timedelta) else f"{_name(budget)}(event)"
    return f"deadline start + {shown}, on expiry {_name(definition.deadline.on_expired)}"


# -- Mermaid ------------------------------------------------------------------------------------


def _mermaid_text(text: str) -> str:
    # A double quote would end a quoted state name; nothing we print needs one.
    return text.replace('"', "'").replace("\n", " ")


def _mermaid_flow(definition: FlowDefinition, prefix: str, title: str) -> list[str]:
    def sid(index: int) -> str:
        return f"{prefix}_step{index}"

    inner: list[str] = []
    for step in definition.steps:
        inner += [f"{sid(step.index)} : {_mermaid_text(line)}" for line in _step_lines(step)]
    for step in definition.steps:
        source = "[*]" if step.index == 0 else sid(step.index - 1)
        inner += [f"{source} --> {sid(step.index)} : {_edge_text(t)}" for t in step.triggers]
        # A meanwhile runs during its step's wait: a loop on the state that names that wait
        # (the box the admin's picture lists it in), not on the step handled before it.
        here = sid(step.index)
        inner += [f"{here} --> {here} : {_meanwhile_text(m)}" for m in step.meanwhile]
    if definition.auto_complete:
        inner.append(f"{sid(len(definition.steps) - 1)} --> [*]")
    else:
        inner.append("%% build(): completes only when a step calls ctx.mark_complete()")
    lines = [
        f"    %% {_mermaid_text(definition.flow_name)}",
        f'    state "{_mermaid_text(title)}" as {prefix} {{',
        *(f"        {line}" for line in inner),
        "    }",
    ]
    deadline = _deadline_text(definition)
    if deadline is not None:
        lines.append(f"    note right of {prefix} : {deadline}")
    return lines


# -- Graphviz dot -------------------------------------------------------------------------------


def _dot_quote(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _dot_flow(definition: FlowDefinition, prefix: str, title: str) -> list[str]:
    def sid(index: int) -> str:
        return f"{prefix}_step{index}"

    inner = [
        f"label={_dot_quote(title)};",
        f'{prefix}_start [shape=point, label=""];',
    ]
    for step in definition.steps:
        label = _dot_quote("\n".join(_step_lines(step)))
        inner.append(f"{sid(step.index)} [label={label}];")
    if definition.auto_complete:
        inner.append(f'{prefix}_end [shape=doublecircle, label="", width=0.15];')
    for step in definition.steps:
        source = f"{prefix}_start" if step.index == 0 else sid(step.index - 1)
        inner += [
            f"{source} -> {sid(step.index)} [label={_dot_quote(_edge_text(t))}];"
            for t in step.triggers
        ]
        here = sid(step.index)  # a meanwhile loops on its own wait, as in Mermaid
        inner += [
            f"{here} -> {here} [label={_dot_quote(_meanwhile_text(m))}, style=dashed];"
            for m in step.meanwhile
        ]
    if definition.auto_complete:
        inner.append(f"{sid(len(definition.steps) - 1)} -> {prefix}_end;")
    deadline = _deadline_text(definition)
    if deadline is not None:
        inner.append(f"{prefix}_deadline [shape=note, label={_dot_quote(deadline)}];")
    return [
        f"    // {definition.flow_name}",
        f"    subgraph cluster_{prefix} {{",
        *(f"        {line}" for line in inner),
        "    }",
    ]
