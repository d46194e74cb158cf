"""The rows tests/testapp/bulk.py writes in bulk are the rows the engine writes.

Each test publishes a start event through the engine, writes one saga of the same flow in
bulk at the same instant, and compares the two sagas' rows without what must differ: ids,
message ids, correlation ids (one per start event either way), trace contexts and the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import pytest

from bsft_saga import publish
from bsft_saga.models import SagaInstance
from tests.testapp.bulk import bulk_ask_questions, bulk_open_notices
from tests.testapp.dispatch_events import NoticeOpened, QuestionAsked

pytestmark = pytest.mark.django_db

# trace_context: the engine stores its step's span when an earlier test installed a tracer
# provider; the bulk rows never come from a step.
_VOLATILE = {"id", "saga_id", "correlation_key", "message_id", "correlation_id", "trace_context"}


def _rows(key: str) -> dict[str, Any]:
    """The rows of the saga keyed ``key``, times relative to its creation, the key as
    ``<key>``; and whether its timers share one correlation id."""
    saga = SagaInstance.objects.get(correlation_key=key)

    def strip(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: strip(v) for k, v in value.items() if k not in _VOLATILE}
        if isinstance(value, str):
            return value.replace(key, "<key>")
        if isinstance(value, datetime):
            return value - saga.created_at
        return value

    timers = list(saga.timeouts.order_by("name").values())
    return {
        "instance": strip(SagaInstance.objects.filter(pk=saga.pk).values().get()),
        "inbox": [strip(row) for row in saga.inbox_entries.values()],
        "timers": [strip(row) for row in timers],
        "correlation ids": len({row["correlation_id"] for row in timers}),
    }


def test_bulk_notices_have_the_shape_the_engine_writes() -> None:
    publish(NoticeOpened("by-engine"))
    now = SagaInstance.objects.get(correlation_key="by-engine").created_at

    bulk_open_notices({"in-bulk": (now, now)}, now)

    assert _rows("in-bulk") == _rows("by-engine")


def test_bulk_notices_are_due_when_asked() -> None:
    now = datetime.fromisoformat("2026-03-02T09:00:00+00:00")
    reminder, final = now - timedelta(minutes=7), now - timedelta(seconds=3)

    bulk_open_notices({"late": (reminder, final)}, now)

    due = SagaInstance.objects.get(correlation_key="late").timeouts.values_list("name", "due_at")
    assert dict(due) == {"reminder": reminder, "final-notice": final}


def test_bulk_questions_have_the_shape_the_engine_writes() -> None:
    publish(QuestionAsked("by-engine", expire_after_seconds=30))
    now = SagaInstance.objects.get(correlation_key="by-engine").created_at

    bulk_ask_questions(["in-bulk"], now + timedelta(seconds=30), now)

    assert _rows("in-bulk") == _rows("by-engine")
