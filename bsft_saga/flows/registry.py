"""The registry of built flows, filled from every app config's ``saga_flows``."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.utils.module_loading import import_string

from bsft_saga.flows import activation
from bsft_saga.flows.base import SagaFlow
from bsft_saga.flows.definition import FlowDefinition


@dataclass(frozen=True)
class FlowProblem:
    """A flow that could not be loaded; reported by ``manage.py check``."""

    check_id: str
    message: str
    obj: Any
    hint: str | None = None


class FlowRegistry:
    """Built flows by saga type and by the event types they await."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._by_saga_type: dict[str, FlowDefinition] = {}
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
        for definition in self._by_saga_type.values():
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
        self._by_saga_type[definition.saga_type] = definition
        self._by_class[flow_class] = definition

    def flows_for(self, event_type: str) -> tuple[FlowDefinition, ...]:
        """The active flows that await ``event_type`` (see :mod:`bsft_saga.flows.activation`)."""
        flows = self._by_event_type.get(event_type, ())
        return tuple(flow for flow in flows if activation.is_active(flow.saga_type))

    def all(self) -> tuple[FlowDefinition, ...]:
        return tuple(self._by_saga_type.values())

    def get(self, flow: type | str) -> FlowDefinition:
        """Return the definition of a flow class or saga type; ``LookupError`` if unknown."""
        found = self._by_saga_type.get(flow) if isinstance(flow, str) else self._by_class.get(flow)
        if found is None:
            known = ", ".join(sorted(self._by_saga_type)) or "none"
            raise LookupError(
                f"No registered flow {flow!r}; list it in an AppConfig.saga_flows. Known: {known}"
            )
        return found


flow_registry = FlowRegistry()
