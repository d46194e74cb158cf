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
