"""Simulated deploys: run a block as a release that installs only some flows would.

``flow_registry.load()`` is what ``ready()`` runs at start-up; loading it again with other
flows is what the next process of another release sees. The registry goes back to the
test app's flows (the current release) when the block ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.apps import apps

from bsft_saga.flows.registry import FlowRegistry, flow_registry


@dataclass
class Release:
    """Stands in for an ``AppConfig``: the registry reads only ``saga_flows``."""

    saga_flows: list[Any] = field(default_factory=list)


@contextmanager
def running_release(*flows: Any) -> Iterator[FlowRegistry]:
    """Inside the block, the installed flows are exactly ``flows``."""
    flow_registry.load([Release(list(flows))])
    try:
        yield flow_registry
    finally:
        flow_registry.load(apps.get_app_configs())
