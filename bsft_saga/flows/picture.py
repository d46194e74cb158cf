"""Draw a flow as an SVG picture, with one instance's progress marked on it.

The instance's admin page shows it inline and ``manage.py saga_graph --format svg`` prints
it. Pure Python, laid out here: no JavaScript, no Graphviz, nothing fetched. The steps stand
in a column from the start at the top to the final state; each edge is labelled with the
events that wake the step below it (``(kept if early)`` for ``keep_early``); each box names
the step's bodies, its ``meanwhile`` handlers and the pending timers of its wait; a
``with_deadline`` budget is a note under the title.

A box is a wait and what follows it: an instance at ``step_index`` k has handled steps 0 to
k - 1 and waits for the events on the edge into box k. Its ``meanwhile`` handlers run
during that wait, and the timers a step schedules belong to the wait the saga moves to
(``SagaTimeout.scheduled_step_index``), so both are drawn in box k.

Every text is escaped (saga types, event, function and timer names come from user code),
with control characters replaced and long texts cut short with an ellipsis. Colours are
the admin's CSS variables (``--body-fg``, ``--selected-row``…), so the picture follows its
light and dark themes, with system colours where they are not defined. The same arguments
always give the same text.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.utils.html import escape

from bsft_saga.flows.definition import FlowDefinition, Meanwhile, StepBody, StepDefinition, Trigger
from bsft_saga.flows.describe import duration, titled
from bsft_saga.moments import format_moment

__all__ = ["PendingTimer", "flow_svg", "flows_svg"]

#: The class of every picture's root element; the style rules are scoped to it (an inline
#: SVG's ``<style>`` applies to the whole HTML page it stands in).
SVG_CLASS = "bsft-saga-flow"

FONT_SIZE = 12
CHAR_WIDTH = 0.6 * FONT_SIZE  # a monospace glyph; a wide (East Asian) one counts twice
LINE = 18
MARGIN = 12
PAD_X = 10
PAD_Y = 6
SPINE = MARGIN + 20  # the x of the edges, left in the column so that labels have room
MIN_BOX_WIDTH = 200
MAX_CHARS = 80
#: Timers listed in one box; the rest are counted ("and 3 more pending timers").
MAX_TIMERS_PER_STEP = 8
GAP = 32  # between the flows of one document

_STYLE = f"""
.{SVG_CLASS} {{ color: var(--body-fg, CanvasText); }}
.{SVG_CLASS} text {{ fill: currentColor; font-size: {FONT_SIZE}px;
  font-family: var(--font-family-monospace, ui-monospace, monospace); white-space: pre; }}
.{SVG_CLASS} .flow-title {{ font-weight: bold; }}
.{SVG_CLASS} .box {{ fill: var(--body-bg, Canvas); stroke: var(--border-color, GrayText); }}
.{SVG_CLASS} .head {{ font-weight: bold; }}
.{SVG_CLASS} .edge line, .{SVG_CLASS} .edge path {{ stroke: currentColor; fill: none; }}
.{SVG_CLASS} .edge .arrow {{ fill: currentColor; stroke: none; }}
.{SVG_CLASS} .start, .{SVG_CLASS} .final .core {{ fill: currentColor; }}
.{SVG_CLASS} .final .ring {{ fill: none; stroke: currentColor; stroke-width: 1.5; }}
.{SVG_CLASS} .dashed line {{ stroke-dasharray: 4 3; }}
.{SVG_CLASS} .step-done .box {{ fill: var(--darkened-bg, Canvas); }}
.{SVG_CLASS} .step-done text, .{SVG_CLASS} .edge-done text,
.{SVG_CLASS} .step-ahead text {{ fill: var(--body-quiet-color, GrayText); }}
.{SVG_CLASS} .edge-done line, .{SVG_CLASS} .edge-done .arrow {{ opacity: 0.5; }}
.{SVG_CLASS} .step-current .box, .{SVG_CLASS} .final-current .ring {{
  fill: var(--selected-row, Mark); stroke: var(--secondary, currentColor); stroke-width: 2; }}
.{SVG_CLASS} .edge-awaited text {{ font-weight: bold; }}
.{SVG_CLASS} .edge-awaited line {{ stroke-width: 2; }}
.{SVG_CLASS} .step-stopped .box {{ stroke: var(--error-fg, currentColor); stroke-width: 2; }}
.{SVG_CLASS} .timer {{ fill: var(--link-fg, LinkText); }}
.{SVG_CLASS} .final-reached .ring {{ stroke: var(--secondary, currentColor); stroke-width: 3; }}
.{SVG_CLASS} .final-reached .core {{ fill: var(--secondary, currentColor); }}
.{SVG_CLASS} .final-terminated .ring, .{SVG_CLASS} .final-terminated .core,
.{SVG_CLASS} .final-terminated text, .{SVG_CLASS} .expired text {{
  fill: var(--error-fg, currentColor); stroke: var(--error-fg, currentColor); }}
.{SVG_CLASS} .final-terminated .ring {{ fill: none; }}
"""


@dataclass(frozen=True)
class PendingTimer:
    """A pending timer, drawn in the box of the wait it belongs to.

    ``step_index`` is its ``SagaTimeout.scheduled_step_index``; ``due_at`` its due time
    (shown as :func:`bsft_saga.moments.format_moment` writes it: to the second, in the
    current time zone, naming the zone), a text shown as it is (a date that cannot be
    read), or ``None``. ``name`` ``None``: drawn without its name, for a viewer who may not
    see timers (``bsft_saga.timeouts.listing.may_see_timers``).
    """

    name: str | None
    step_index: int
    due_at: datetime | str | None = None


def flow_svg(
    definition: FlowDefinition,
    *,
    step_index: int | None = None,
    completed: bool = False,
    pending_timers: Iterable[PendingTimer] = (),
    terminated: bool = False,
    expired: bool = False,
    deadline_at: datetime | str | None = None,
) -> str:
    """Return one flow as an ``<svg>`` element, marked with one instance's progress.

    Without ``step_index`` the flow is drawn as declared. With it (the instance's
    ``step_index``): the steps before it are done, the step at it is the one the instance
    waits at (or, once ``completed`` by a termination or a deadline, where it stopped),
    the ones after it are ahead. ``completed`` reaches the final state, ``terminated``
    draws it as terminated; ``expired`` marks the deadline note, which ``deadline_at``
    (the instance's ``deadline``) dates. ``pending_timers`` are listed in their step's box.
    The picture is sized to its content (``viewBox``, ``width``, ``height``).
    """
    marks = _Marks(
        step_index=step_index,
        completed=completed,
        terminated=terminated,
        expired=expired,
        deadline_at=deadline_at,
        timers=tuple(pending_timers),
    )
    title = titled([definition])[0][1]
    column = _column(definition, title, marks)
    return _svg([column], _summary(definition, title, marks))


def flows_svg(definitions: Sequence[FlowDefinition]) -> str:
    """Return several flows, or versions of one, side by side in one ``<svg>`` element,
    as declared (no instance marked); each is titled as ``saga_graph`` titles its boxes."""
    columns = [_column(d, title, _Marks()) for d, title in titled(definitions)]
    names = ", ".join(title for _, title in titled(definitions))
    return _svg(columns, f"Saga flows: {names}")


# -- what is marked -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Marks:
    step_index: int | None = None
    completed: bool = False
    terminated: bool = False
    expired: bool = False
    deadline_at: datetime | str | None = None
    timers: tuple[PendingTimer, ...] = ()

    def status(self, index: int) -> str | None:
        """``done``, ``current``, ``stopped`` or ``ahead`` for the step at ``index``."""
        if self.step_index is None:
            return None
        if index < self.step_index:
            return "done"
        if index > self.step_index:
            return "ahead"
        if not self.completed:
            return "current"
        # A termination or a deadline ends the wait without handling its event; a step
        # that completes the saga moves it on first, so the step at step_index never ran.
        return "stopped" if self.terminated or self.expired else "ahead"

    def timers_at(self, index: int, end: int) -> list[PendingTimer]:
        """The timers of the wait at ``index``; at ``end`` (the final state), those
        scheduled after the last step (only ``ctx.mark_complete()`` can end that wait)."""
        return [t for t in self.timers if min(t.step_index, end) == index]


_STATUS_TAG = {"done": "✓ done", "current": "▶ waiting here", "stopped": "■ stopped here"}
_STATUS_TITLE = {
    "done": "handled",
    "current": "the saga waits here",
    "stopped": "the saga stopped here, its event never came",
    "ahead": "not reached",
}


def _summary(definition: FlowDefinition, title: str, marks: _Marks) -> str:
    """The picture's accessible name: the flow, and where the instance is."""
    steps = len(definition.steps)
    words = [f"Flow {title}, {steps} step{'s' if steps != 1 else ''}"]
    index = marks.step_index
    if index is not None:
        if marks.terminated:
            words.append(f"terminated at step {index}")
        elif marks.completed:
            words.append("complete")
        elif index < steps:
            words.append(f"waiting at {definition.steps[index].label}")
        else:
            words.append("every step handled, waiting for ctx.mark_complete()")
        if marks.timers:
            count = len(marks.timers)
            words.append(f"{count} pending timer{'s' if count != 1 else ''}")
        if marks.expired:
            words.append("deadline expired")
    return "; ".join(words)


# -- layout ---------------------------------------------------------------------------------------


@dataclass
class _Column:
    """One flow's drawing, at the origin; ``width`` and ``height`` include the margins."""

    parts: list[str] = field(default_factory=list)
    width: float = 0
    height: float = 0

    def reach(self, x: float) -> None:
        self.width = max(self.width, x + MARGIN)


def _column(definition: FlowDefinition, title: str, marks: _Marks) -> _Column:
    column = _Column()
    y: float = MARGIN
    column.parts.append(_text(MARGIN, y + 13, title, "flow-title"))
    column.reach(MARGIN + _width(title))
    y += LINE
    note = _deadline_lines(definition, marks)
    if note:
        cls = "deadline expired" if marks.expired else "deadline"
        texts = [_text(MARGIN, y + n * LINE + 13, line) for n, line in enumerate(note)]
        column.parts.append(f'<g class="{cls}">{"".join(texts)}</g>')
        column.reach(MARGIN + max(_width(line) for line in note))
        y += len(note) * LINE
    y += 8
    column.parts.append(f'<circle class="start" cx="{SPINE}" cy="{_n(y + 6)}" r="6"/>')
    y += 12

    end = len(definition.steps)
    boxes = [_box_lines(step, marks.timers_at(step.index, end)) for step in definition.steps]
    box_width = max(
        MIN_BOX_WIDTH,
        *(_width(line) + 2 * PAD_X for lines in boxes for line, _ in lines),
        *(
            _width(_head(s)) + _width(_STATUS_TAG.get(marks.status(s.index) or "", "")) + 4 * PAD_X
            for s in definition.steps
        ),
    )
    column.reach(MARGIN + box_width)
    for step, lines in zip(definition.steps, boxes, strict=True):
        status = marks.status(step.index)
        y = _edge(column, y, [_trigger_text(t) for t in step.triggers], _edge_class(status))
        y = _box(column, y, box_width, step, status, lines)
    _final(column, y, definition, marks)
    return column


def _edge_class(status: str | None) -> str:
    if status == "done":
        return "edge edge-done"
    if status in ("current", "stopped"):
        return "edge edge-awaited"
    return "edge"


def _edge(column: _Column, y: float, labels: list[str], cls: str) -> float:
    """An arrow down the spine from ``y`` with ``labels`` beside it; returns where it ends."""
    height = max(28, len(labels) * LINE + 10)
    end = y + height
    parts = [
        f'<g class="{cls}">',
        f'<line x1="{SPINE}" y1="{_n(y)}" x2="{SPINE}" y2="{_n(end - 6)}"/>',
        f'<path class="arrow" d="M{SPINE - 4} {_n(end - 7)}L{SPINE} {_n(end)}'
        f'L{SPINE + 4} {_n(end - 7)}Z"/>',
    ]
    top = y + (height - len(labels) * LINE) / 2
    for number, label in enumerate(labels):
        parts.append(_text(SPINE + 10, top + number * LINE + 13, label))
        column.reach(SPINE + 10 + _width(label))
    parts.append("</g>")
    column.parts.append("".join(parts))
    return end


def _head(step: StepDefinition) -> str:
    verb = "start_with" if step.index == 0 else "wait_for"
    return f"step {step.index} · {verb}"


def _box_lines(step: StepDefinition, timers: list[PendingTimer]) -> list[tuple[str, str]]:
    """The lines below a box's head, each with its class."""
    lines = [(_body_text(b), "body") for b in step.bodies]
    lines += [(_meanwhile_text(m), "meanwhile") for m in step.meanwhile]
    return lines + _timer_lines(timers)


def _timer_lines(timers: list[PendingTimer]) -> list[tuple[str, str]]:
    lines = [(_timer_text(t), "timer") for t in timers[:MAX_TIMERS_PER_STEP]]
    more = len(timers) - MAX_TIMERS_PER_STEP
    if more > 0:
        lines.append((f"and {more} more pending timer{'s' if more != 1 else ''}", "timer"))
    return lines


def _box(
    column: _Column,
    y: float,
    width: float,
    step: StepDefinition,
    status: str | None,
    lines: list[tuple[str, str]],
) -> float:
    height = 2 * PAD_Y + (1 + len(lines)) * LINE
    cls = "step" if status is None else f"step step-{status}"
    tip = step.label if status is None else f"{step.label}: {_STATUS_TITLE[status]}"
    data = f' data-status="{status}"' if status is not None else ""
    parts = [
        f'<g class="{cls}" data-step="{step.index}"{data}>',
        f"<title>{_escape(tip, None)}</title>",
        f'<rect class="box" x="{MARGIN}" y="{_n(y)}" width="{_n(width)}" '
        f'height="{_n(height)}" rx="6"/>',
        _text(MARGIN + PAD_X, y + PAD_Y + 13, _head(step), "head"),
    ]
    tag = _STATUS_TAG.get(status or "")
    if tag is not None:
        parts.append(_text(MARGIN + width - PAD_X, y + PAD_Y + 13, tag, "tag", anchor="end"))
    for number, (line, line_class) in enumerate(lines, start=1):
        parts.append(_text(MARGIN + PAD_X, y + PAD_Y + number * LINE + 13, line, line_class))
    parts.append("</g>")
    column.parts.append("".join(parts))
    return y + height


def _final(column: _Column, y: float, definition: FlowDefinition, marks: _Marks) -> None:
    """The edge to the final state, and the state: reached, terminated, or waited for."""
    end = len(definition.steps)
    waits_at_end = marks.status(end) == "current"
    label = [] if definition.auto_complete else ["when a step calls ctx.mark_complete()"]
    edge = "edge" if definition.auto_complete else "edge dashed"
    if marks.completed:
        edge += " edge-done"
    elif waits_at_end:
        edge += " edge-awaited"
    y = _edge(column, y, label, edge)
    if marks.terminated:
        cls, text = "final final-terminated", "✕ terminated"
    elif marks.completed:
        cls, text = "final final-reached", "✓ complete"
    elif waits_at_end:
        cls, text = "final final-current", "every step handled, not complete"
    else:
        cls, text = "final", "complete"
    center = y + 10
    parts = [
        f'<g class="{cls}">',
        f"<title>{_escape(text)}</title>",
        f'<circle class="ring" cx="{SPINE}" cy="{_n(center)}" r="9"/>',
        f'<circle class="core" cx="{SPINE}" cy="{_n(center)}" r="5"/>',
        _text(SPINE + 16, center + 4, text),
    ]
    column.reach(SPINE + 16 + _width(text))
    bottom = center + 10
    for line, line_class in _timer_lines(marks.timers_at(end, end)):
        parts.append(_text(SPINE + 16, bottom + 13, line, line_class))
        column.reach(SPINE + 16 + _width(line))
        bottom += LINE
    parts.append("</g>")
    column.parts.append("".join(parts))
    column.height = bottom + MARGIN


def _svg(columns: list[_Column], summary: str) -> str:
    width = sum(c.width for c in columns) + GAP * (len(columns) - 1)
    height = max(c.height for c in columns)
    body = []
    x: float = 0
    for column in columns:
        inner = "\n".join(column.parts)
        body.append(f'<g class="flow" transform="translate({_n(x)} 0)">\n{inner}\n</g>')
        x += column.width + GAP
    w, h = _n(math.ceil(width)), _n(math.ceil(height))
    return "\n".join(
        [
            f'<svg xmlns="http://www.w3.org/2000/svg" class="{SVG_CLASS}" role="img" '
            f'aria-label="{_escape(summary, None)}" viewBox="0 0 {w} {h}" width="{w}" height="{h}" '
            'style="max-width: 100%; height: auto">',
            f"<title>{_escape(summary, None)}</title>",
            f"<style>{_STYLE}</style>",
            *body,
            "</svg>",
        ]
    )


# -- words ----------------------------------------------------------------------------------------


def _callable_name(func: Any) -> str:
    name = getattr(func, "__name__", None) or type(func).__name__
    return "lambda" if name == "<lambda>" else str(name)


def _trigger_text(trigger: Trigger) -> str:
    name = trigger.event_class.__name__
    return f"{name} (kept if early)" if trigger.keep_early else name


def _body_text(body: StepBody) -> str:
    if body.guard is None:
        return f"then {_callable_name(body.run)}"
    condition = _callable_name(body.guard)
    return f"when {'not ' if body.negate else ''}{condition} then {_callable_name(body.run)}"


def _meanwhile_text(meanwhile: Meanwhile) -> str:
    name = meanwhile.trigger.event_class.__name__
    return f"meanwhile {name}: {_callable_name(meanwhile.body)}"


def _timer_text(timer: PendingTimer) -> str:
    named = "timer" if timer.name is None else f"timer {timer.name}"
    if timer.due_at is None:
        return named
    return f"{named} · due {format_moment(timer.due_at)}"


def _deadline_lines(definition: FlowDefinition, marks: _Marks) -> list[str]:
    """The deadline note: the flow's budget, the instance's deadline, whether it expired."""
    lines = []
    if definition.deadline is not None:
        budget = definition.deadline.budget
        shown = (
            duration(budget)
            if isinstance(budget, timedelta)
            else f"{_callable_name(budget)}(event)"
        )
        on_expired = _callable_name(definition.deadline.on_expired)
        lines.append(f"deadline start + {shown}, on expiry {on_expired}")
    if marks.deadline_at is not None:
        lines.append(f"deadline at {format_moment(marks.deadline_at)}")
    if marks.expired:
        lines.append("deadline expired" if not lines else f"{lines.pop()} · expired")
    return lines


# -- SVG text -------------------------------------------------------------------------------------


def _clean(text: str, limit: int | None = MAX_CHARS) -> str:
    """``text`` on one line, with what XML cannot hold replaced, cut to ``limit``."""
    chars = []
    for char in text:
        category = unicodedata.category(char)
        if char in "\t\n\r":
            chars.append(" ")
        elif category in ("Cc", "Cs") or char in "\ufffe\uffff":
            chars.append("\N{REPLACEMENT CHARACTER}")
        else:
            chars.append(char)
    cleaned = "".join(chars)
    return cleaned if limit is None or len(cleaned) <= limit else cleaned[: limit - 1] + "…"


def _escape(text: str, limit: int | None = MAX_CHARS) -> str:
    return str(escape(_clean(text, limit)))


def _width(text: str) -> float:
    """The drawn width of ``text`` once cleaned, in a monospace font."""
    cells = sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in _clean(text))
    return math.ceil(cells * CHAR_WIDTH)


def _text(x: float, y: float, text: str, cls: str = "", *, anchor: str = "") -> str:
    attributes = f' class="{cls}"' if cls else ""
    if anchor:
        attributes += f' text-anchor="{anchor}"'
    return f'<text x="{_n(x)}" y="{_n(y)}"{attributes}>{_escape(text)}</text>'


def _n(value: float) -> str:
    """A coordinate: an integer where it is one, else one decimal (stable text)."""
    rounded = round(value, 1)
    return str(int(rounded)) if rounded == int(rounded) else f"{rounded:.1f}"
