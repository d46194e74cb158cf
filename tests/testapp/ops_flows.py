"""Flows of one test area (see tests/testapp/apps.py)."""

from __future__ import annotations

from bsft_saga import SagaFlow

FLOWS: list[type[SagaFlow]] = []
