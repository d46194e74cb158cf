"""Words shared by the flow drawings (``graph`` for Mermaid and dot, ``picture`` for SVG)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import timedelta

from bsft_saga.flows.definition import FlowDefinition

__all__ = ["duration", "titled"]


def titled(definitions: Sequence[FlowDefinition]) -> list[tuple[FlowDefinition, str]]:
    """Each flow with its box title: the saga type, and the version where it tells them apart."""
    drawn = Counter(d.saga_type for d in definitions)

    def title(d: FlowDefinition) -> str:
        if drawn[d.saga_type] == 1 and d.version == 1:
            return d.saga_type
        return f"{d.saga_type} v{d.version}"

    return [(d, title(d)) for d in definitions]


def duration(value: timedelta) -> str:
    """``timedelta(days=1, hours=2)`` -> ``"1d 2h"``."""
    seconds = value.total_seconds()
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{int(count)}{unit}")
    if seconds or not parts:
        parts.append(f"{seconds:g}s")
    return " ".join(parts)
