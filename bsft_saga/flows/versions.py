"""Earlier versions of a flow: building and validating ``SagaFlow.previous_versions``.

A release that reorders or removes steps raises the flow's ``version`` and keeps the old
definition in ``previous_versions``, so the instances that started under it finish on
the steps they started with. Each entry is checked here; a bad one is a problem for
``manage.py check`` (never an import error) and is left out.
"""

from __future__ import annotations

from django.utils.module_loading import import_string

from bsft_saga.flows.base import SagaFlow
from bsft_saga.flows.definition import FlowDefinition
from bsft_saga.flows.problems import FlowProblem

_HINT = (
    "previous_versions lists the earlier definitions of this flow: SagaFlow classes (or "
    "dotted paths to them) with the same saga_type and a lower version, one per version."
)


def build_previous_versions(
    flow_class: type[SagaFlow], current: FlowDefinition
) -> tuple[list[tuple[type[SagaFlow], FlowDefinition]], list[FlowProblem]]:
    """Build every entry of ``flow_class.previous_versions`` that fits ``current``.

    Returns each entry's class and definition, lowest version first, and one problem per
    entry left out:
    E013 (cannot be imported, or not a ``SagaFlow``), E011 (its ``configure()`` fails),
    E014 (another ``saga_type``), E015 (a version not lower than the current one), E016
    (a version another entry already has).
    """
    where = f"{current.flow_name}.previous_versions"
    built: dict[int, tuple[type[SagaFlow], FlowDefinition]] = {}
    problems: list[FlowProblem] = []

    def problem(check_id: str, message: str) -> None:
        problems.append(FlowProblem(check_id, f"{where}: {message}", flow_class, _HINT))

    entries = flow_class.previous_versions
    if isinstance(entries, str):
        entries = (entries,)
    for entry in entries:
        try:
            earlier = import_string(entry) if isinstance(entry, str) else entry
        except ImportError as exc:
            problem("bsft_saga.E013", f"cannot import {entry!r}: {exc}")
            continue
        if not (isinstance(earlier, type) and issubclass(earlier, SagaFlow)):
            problem("bsft_saga.E013", f"{entry!r} is not a SagaFlow subclass")
            continue
        try:
            definition = earlier.build_definition()
        except Exception as exc:  # one broken entry must not hide the others' problems
            problem("bsft_saga.E011", str(exc))
            continue
        if definition.saga_type != current.saga_type:
            problem(
                "bsft_saga.E014",
                f"{definition.flow_name} has saga_type {definition.saga_type!r}, "
                f"not {current.saga_type!r}",
            )
        elif definition.version >= current.version:
            problem(
                "bsft_saga.E015",
                f"{definition.flow_name} has version {definition.version}, which is not "
                f"lower than {current.flow_name}'s version {current.version}",
            )
        elif definition.version in built:
            problem(
                "bsft_saga.E016",
                f"{definition.flow_name} and {built[definition.version][1].flow_name} "
                f"both declare version {definition.version}",
            )
        else:
            built[definition.version] = (earlier, definition)
    return [built[v] for v in sorted(built)], problems
