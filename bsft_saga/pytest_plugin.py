"""pytest plugin (entry point ``bsft_saga``): the ``saga_harness`` fixture."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from bsft_saga.testing import SagaHarness


def pytest_configure(config: pytest.Config) -> None:
    """Keep pytest's own clock out of freezegun's reach, so ``--durations`` stays true.

    freezegun replaces ``time.perf_counter`` and ``time.time`` in every loaded module,
    pytest's timing module included: a test whose fixture froze time (``saga_harness``
    does, for the whole test) was reported as lasting fifty years, or as long as it moved
    the clock. Calls made from a module on freezegun's ignore list get the real clock.
    """
    try:
        import freezegun
    except ModuleNotFoundError:  # freezegun comes with the `testing` extra
        return
    freezegun.configure(extend_ignore_list=["_pytest.timing"])


@pytest.fixture
def saga_harness(transactional_db: Any) -> Iterator[SagaHarness]:
    """A started ``SagaHarness`` on a transactional test database.

    Transactional, so that ``on_commit`` delivery runs as in production.
    """
    from bsft_saga.testing import SagaHarness

    with SagaHarness() as harness:
        yield harness
