"""pytest plugin (entry point ``bsft_saga``): the ``saga_harness`` fixture."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from bsft_saga.testing import SagaHarness


@pytest.fixture
def saga_harness(transactional_db: Any) -> Iterator[SagaHarness]:
    """A started ``SagaHarness`` on a transactional test database.

    Transactional, so that ``on_commit`` delivery runs as in production.
    """
    from bsft_saga.testing import SagaHarness

    with SagaHarness() as harness:
        yield harness
