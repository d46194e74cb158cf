"""What loading the flows found wrong, kept for ``manage.py check``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FlowProblem:
    """A flow (or an earlier version of one) that could not be loaded."""

    check_id: str
    message: str
    obj: Any
    hint: str | None = None


def shape_problems(definition: Any, obj: Any) -> list[FlowProblem]:
    """What is wrong with the shape of a built flow ``definition`` (``obj``: its class).

    E018: keyed and unkeyed waits mixed: the unkeyed ones reach the single instance (key
    ``""``), never the keyed instances. E019: ``keep_early`` on an alternative of the start step
    (``or_`` right after ``start_with``): an event of the start step starts a saga, so
    nothing is ever kept for it. (On the first wait it keeps an event that arrives before
    its saga starts.) E021: ``meanwhile`` for a type its own step awaits: the wait
    would take the event, and the body never runs.
    """
    problems = []
    triggers = [
        (step, trigger, verb)
        for step in definition.steps
        for verb, group in (
            ("", step.triggers),
            ("meanwhile ", [m.trigger for m in step.meanwhile]),
        )
        for trigger in group
    ]
    keyed = [(step, t, verb) for step, t, verb in triggers if t.key is not None]
    unkeyed = [(step, t, verb) for step, t, verb in triggers if t.key is None]
    if keyed and unkeyed:
        step, trigger, verb = unkeyed[0]
        problems.append(
            FlowProblem(
                "bsft_saga.E018",
                f"{definition.where(step.index)}: {verb}{trigger.event_class.__name__} has no "
                "key while other waits of the flow have one; it would only reach the single "
                "instance",
                obj,
                hint="Give every start_with/wait_for/or_/meanwhile a key=, or none of them.",
            )
        )
    for step in definition.steps[:1]:
        for trigger in step.triggers:
            if trigger.keep_early:
                problems.append(
                    FlowProblem(
                        "bsft_saga.E019",
                        f"{definition.where(step.index)}: keep_early on "
                        f"{trigger.event_class.__name__}, but this is the start step: its "
                        "event starts a saga, so nothing is ever kept for it",
                        obj,
                        hint="Drop keep_early=True, or move the event to a later wait.",
                    )
                )
    for step in definition.steps:
        awaited = {t.event_type for t in step.triggers}
        for m in step.meanwhile:
            if m.trigger.event_type in awaited:
                problems.append(
                    FlowProblem(
                        "bsft_saga.E021",
                        f"{definition.where(step.index)}: meanwhile for "
                        f"{m.trigger.event_class.__name__}, which this step also awaits: the "
                        "wait takes the event and the meanwhile body never runs",
                        obj,
                        hint="Await the type, or run it meanwhile; not both in one step.",
                    )
                )
    return problems
