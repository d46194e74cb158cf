"""A delayed message through a real dispatcher: ``manage.py drain_saga_timeouts --loop`` in a
child process delivers it once its ``deliver_at`` has come, and not before.

The test publishes a delayed ``InvoiceIssued`` (a start event, so its delivery leaves a
trace the child writes: the InvoiceFlow instance it starts) while the loop is polling every
second (``POLL_INTERVAL`` of tests/settings.py).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from bsft_saga import clock, publish
from bsft_saga.models import SagaInstance, SagaOutboxMessage
from tests.testapp.delayed_events import InvoiceIssued
from tests.testapp.delayed_flows import InvoiceFlow

pytestmark = pytest.mark.slow

DELAY = timedelta(seconds=3)


def _started() -> SagaInstance | None:
    return SagaInstance.objects.filter(
        saga_type=InvoiceFlow.saga_type, correlation_key="inv-loop"
    ).first()


def test_a_dispatcher_process_delivers_a_delayed_message_at_its_time_and_not_before(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    out = (tmp_path / "drain.out").open("wb")
    err = (tmp_path / "drain.err").open("wb")
    child = subprocess.Popen(
        [sys.executable, "-m", "django", "drain_saga_timeouts", "--loop", "-v", "2"],
        env=subprocess_env,
        stdout=out,
        stderr=err,
    )
    try:
        time.sleep(1.5)  # the loop is up and polling
        envelope = publish(InvoiceIssued("inv-loop"), delay=DELAY)
        deliver_at = SagaOutboxMessage.objects.get(pk=envelope.message_id).deliver_at
        assert deliver_at is not None

        while clock.now() < deliver_at - timedelta(milliseconds=300):
            assert _started() is None, "delivered before its deliver_at"
            assert child.poll() is None, (tmp_path / "drain.err").read_text()
            time.sleep(0.1)
        give_up = time.monotonic() + 30
        while _started() is None:
            assert time.monotonic() < give_up, (tmp_path / "drain.err").read_text()
            time.sleep(0.1)

        saga = _started()
        assert saga is not None
        assert saga.created_at >= deliver_at  # the child's step ran at or after it
        row = SagaOutboxMessage.objects.get(pk=envelope.message_id)
        assert row.delivered_at is not None
        assert row.delivered_at >= deliver_at

        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=30) == 0, (tmp_path / "drain.err").read_text()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        out.close()
        err.close()
    output = (tmp_path / "drain.out").read_text()
    assert "outbox: delivered=1" in output
