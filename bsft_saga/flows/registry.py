"""The registry of built flows, filled from every app config's ``saga_flows``.

Each saga type has a current definition (the flow listed in ``saga_flows``), which new
instances start on, and may have earlier versions (its ``previous_versions``), which run
the instances that started under them until they complete.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.utils.module_loading import import_string

from bsft_saga.exceptions import UnknownFlowVersion
from bsft_saga.flows import activation
from bsft_saga.flows.base import SagaFlow
from bsft_saga.flows.definition import FlowDefinition
from bsft_saga.flows.problems import FlowProblem, shape_problems
from bsft_saga.flows.versions import build_previous_versions

__all__ = ["FlowProblem", "FlowRegistry", "flow_registry"]


class FlowRegistry:
    """Built flows by saga type and version, and by the event types they await."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._by_saga_type: dict[str, FlowDefinition] = {}
        self._versions: dict[str, dict[int, FlowDefinition]] = {}
        self._by_class: dict[type, FlowDefinition] = {}
        self._by_event_type: dict[str, tuple[FlowDefinition, ...]] = {}
        self.problems: list[FlowProblem] = []

    def load(self, app_configs: Iterable[Any]) -> None:
        """Collect, build and index ``saga_flows`` from ``app_configs``; never raises.

        Problems are kept in ``problems`` for the system checks, so ``manage.py check``
        lists all of them at once instead of stopping at the first.
        """
        self._reset()
        for config in app_configs:
            for entry in getattr(config, "saga_flows", ()) or ():
                self._load_one(config, entry)
        index: dict[str, list[FlowDefinition]] = {}
        for versions in self._versions.values():
            for definition in versions.values():
                for event_type in definition.event_types:
                    index.setdefault(event_type, []).append(definition)
        self._by_event_type = {k: tuple(v) for k, v in index.items()}

    def _load_one(self, config: Any, entry: Any) -> None:
        where = f"{type(config).__name__}.saga_flows"
        try:
            flow_class = import_string(entry) if isinstance(entry, str) else entry
        except ImportError as exc:
            self.problems.append(
                FlowProblem(
                    "bsft_saga.E010", f"{where}: cannot import flow {entry!r}: {exc}", config
                )
            )
            return
        if not (isinstance(flow_class, type) and issubclass(flow_class, SagaFlow)):
            self.problems.append(
                FlowProblem(
                    "bsft_saga.E010", f"{where}: {entry!r} is not a SagaFlow subclass", config
                )
            )
            return
        try:
            definition = flow_class.build_definition()
        except Exception as exc:  # a broken flow must not hide the others' problems
            self.problems.append(FlowProblem("bsft_saga.E011", f"{where}: {exc}", flow_class))
            return
        other = self._by_saga_type.get(definition.saga_type)
        if other is not None:
            self.problems.append(
                FlowProblem(
                    "bsft_saga.E012",
                    f"{definition.flow_name} and {other.flow_name} share saga_type "
                    f"{definition.saga_type!r}",
                    flow_class,
                    hint="Give each flow a unique, stable saga_type class attribute.",
                )
            )
            return
        self.problems += shape_problems(definition, flow_class)
        earlier, problems = build_previous_versions(flow_class, definition)
        self.problems += problems
        self._by_saga_type[definition.saga_type] = definition
        self._versions[definition.saga_type] = {
            **{d.version: d for _, d in earlier},
            definition.version: definition,
        }
        self._by_class.update(earlier)
        self._by_class[flow_class] = definition

    def flows_for(self, event_type: str) -> tuple[FlowDefinition, ...]:
        """Every definition, of any installed version, with a step that awaits ``event_type``,
        of the flows that are active (see :mod:`bsft_saga.flows.activation`)."""
        flows = self._by_event_type.get(event_type, ())
        return tuple(flow for flow in flows if activation.is_active(flow.saga_type))

    def all(self) -> tuple[FlowDefinition, ...]:
        """The current definition of every registered saga type."""
        return tuple(self._by_saga_type.values())

    def get(self, flow: type | str) -> FlowDefinition:
        """Return the definition of a flow class (current or previous version), or the
        current definition of a saga type; ``LookupError`` if unknown."""
        found = self._by_saga_type.get(flow) if isinstance(flow, str) else self._by_class.get(flow)
        if found is None:
            known = ", ".join(sorted(self._by_saga_type)) or "none"
            raise LookupError(
                f"No registered flow {flow!r}; list it in an AppConfig.saga_flows. Known: {known}"
            )
        return found

    def versions(self, flow: type | str) -> tuple[FlowDefinition, ...]:
        """Every installed version of a flow class or saga type, lowest first (current last)."""
        saga_type = self.get(flow).saga_type
        versions = self._versions[saga_type]
        return tuple(versions[v] for v in sorted(versions))

    def definition_for(self, saga_type: str, flow_version: int) -> FlowDefinition:
        """The definition that runs an instance of ``saga_type`` started under ``flow_version``.

        ``UnknownFlowVersion`` if no installed flow declares that version (a release that
        dropped it from ``previous_versions`` too early, or a rolled-back deploy).
        """
        versions = self._versions.get(saga_type, {})
        try:
            return versions[flow_version]
        except KeyError:
            raise UnknownFlowVersion(saga_type, flow_version, tuple(sorted(versions))) from None

    def is_current(self, definition: FlowDefinition) -> bool:
        """Whether new instances of ``definition``'s saga type start on it."""
        return self._by_saga_type.get(definition.saga_type) is definition


flow_registry = FlowRegistry()
