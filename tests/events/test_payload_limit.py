"""``BSFT_SAGA["MAX_PAYLOAD_BYTES"]``: an event too large to carry is refused where it is
encoded, before anything is written (a 50 MB event used to be accepted into jsonb and read
back by every pass that claimed it).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.test import override_settings

from bsft_saga import publish
from bsft_saga.conf import saga_settings, validate
from bsft_saga.events.payloads import encoded_size
from bsft_saga.models import SagaInstance, SagaOutboxMessage, SagaTimeout
from tests.testapp.engine_events import Unrouted
from tests.testapp.timer_events import ProbeDue, ProbeStarted
from tests.testapp.timer_flows import ProbeFlow, schedule_probe_due

pytestmark = pytest.mark.django_db

LIMIT = 1000


def limited(limit: int | None = LIMIT) -> Any:
    return override_settings(BSFT_SAGA={"MAX_PAYLOAD_BYTES": limit})


def note_of_size(total: int) -> Unrouted:
    """An ``Unrouted`` whose encoded payload is exactly ``total`` bytes."""
    overhead = encoded_size({"note": ""})
    return Unrouted("x" * (total - overhead))


def test_the_default_limit_is_256_kib() -> None:
    assert saga_settings.max_payload_bytes == 262144


def test_an_event_of_exactly_the_limit_is_published() -> None:
    with limited():
        envelope = publish(note_of_size(LIMIT), defer=True)

    assert SagaOutboxMessage.objects.filter(pk=envelope.message_id).exists()


@pytest.mark.parametrize("defer", [False, True], ids=["publish", "defer"])
def test_a_larger_event_is_a_value_error_naming_type_size_and_limit(defer: bool) -> None:
    with limited(), pytest.raises(ValueError, match=r"tests\.engine\.unrouted") as raised:
        publish(note_of_size(LIMIT + 1), defer=defer)

    assert f"{LIMIT + 1} bytes" in str(raised.value)
    assert f"MAX_PAYLOAD_BYTES'] = {LIMIT}" in str(raised.value)
    assert not SagaOutboxMessage.objects.exists()


def test_the_callers_transaction_stays_usable_after_a_refused_event() -> None:
    with limited(), transaction.atomic():
        with pytest.raises(ValueError, match="MAX_PAYLOAD_BYTES"):
            publish(note_of_size(LIMIT + 1), defer=True)
        publish(Unrouted("small"), defer=True)  # the same transaction goes on

    assert list(SagaOutboxMessage.objects.values_list("payload", flat=True)) == [{"note": "small"}]


def test_a_timer_too_large_fails_its_step_and_leaves_nothing(action: Any) -> None:
    huge = "y" * LIMIT
    remind = action(schedule_probe_due("remind", timedelta(hours=1), label=huge))

    with limited(), pytest.raises(ValueError, match=r"tests\.timers\.probe-due: .* bytes"):
        publish(ProbeStarted("p-big", remind))

    assert not SagaInstance.objects.filter(saga_type=ProbeFlow.saga_type).exists()
    assert not SagaTimeout.objects.exists()


def test_an_event_a_step_publishes_too_large_fails_the_step(action: Any) -> None:
    shout = action(lambda ctx, e: ctx.publish(note_of_size(LIMIT + 1)))

    with limited(), pytest.raises(ValueError, match="MAX_PAYLOAD_BYTES"):
        publish(ProbeStarted("p-shout", shout))

    assert not SagaInstance.objects.filter(saga_type=ProbeFlow.saga_type).exists()
    assert not SagaOutboxMessage.objects.exists()


def test_none_lifts_the_limit() -> None:
    with limited(None):
        publish(ProbeDue("p-1", "z" * 300_000), defer=True)

    assert SagaOutboxMessage.objects.count() == 1


@pytest.mark.parametrize("value", [0, -1, 1.5, "256k", True])
def test_a_limit_that_is_not_a_positive_number_of_bytes_is_refused(value: object) -> None:
    [problem] = validate({"MAX_PAYLOAD_BYTES": value})

    assert problem.path == "MAX_PAYLOAD_BYTES"
    assert "positive number of bytes, or None" in problem.message
