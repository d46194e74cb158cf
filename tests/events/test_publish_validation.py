"""Publish-time validation: what a database could not store is refused before anything is written.

PostgreSQL refuses NUL characters and lone surrogates in text and ``jsonb``, and a key or a
correlation id longer than its 200-character column; SQLite stores all of them. bsft_saga
refuses them at ``publish`` on every backend, so the failure is the caller's exception, no
row is left behind, and the caller's transaction goes on (on PostgreSQL a failed statement
would abort it: the tests run inside ``transaction.atomic()`` to prove it did not happen).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from django.db import transaction

from bsft_saga import event, publish
from bsft_saga.correlation import correlation_scope
from bsft_saga.models import SagaInstance, SagaOutboxMessage
from bsft_saga.outbox import deliver_pending
from tests.testapp.events import OrderPlaced

pytestmark = pytest.mark.django_db

LONGEST = 200


@event("tests.validation.measured")
@dataclass(frozen=True)
class Measured:
    """No flow awaits it: only the codec and the outbox see it."""

    reading: float


def nothing_written() -> bool:
    return not SagaInstance.objects.exists() and not SagaOutboxMessage.objects.exists()


def still_usable() -> None:
    """The caller's transaction accepts more work after the refused publish."""
    publish(OrderPlaced("after"))
    assert list(SagaInstance.objects.values_list("correlation_key", flat=True)) == ["after"]


@pytest.mark.parametrize("defer", [False, True], ids=["now", "deferred"])
@pytest.mark.parametrize(
    ("event_", "problem"),
    [
        (OrderPlaced("o\x00-1"), "str holds a NUL character"),
        (OrderPlaced("o-\ud800"), "lone surrogate"),
        (Measured(2**53 + 1), "2\\*\\*53"),
    ],
    ids=["nul", "lone-surrogate", "int-above-2**53-in-a-float"],
)
def test_a_payload_no_backend_could_read_back_is_a_type_error_at_publish(
    event_: Any, problem: str, defer: bool
) -> None:
    with transaction.atomic():
        with pytest.raises(TypeError, match=problem):
            publish(event_, defer=defer)

        assert nothing_written()
        still_usable()


def test_an_int_a_float_holds_exactly_is_published() -> None:
    publish(Measured(2**53), defer=True)

    assert SagaOutboxMessage.objects.get().payload == {"reading": float(2**53)}


@pytest.mark.parametrize("defer", [False, True], ids=["now", "deferred"])
def test_a_given_correlation_id_longer_than_200_characters_is_a_value_error(defer: bool) -> None:
    with transaction.atomic():
        with pytest.raises(ValueError, match="correlation id is 201 characters long; at most 200"):
            publish(OrderPlaced("o-1"), correlation_id="c" * (LONGEST + 1), defer=defer)

        assert nothing_written()
        still_usable()


@pytest.mark.parametrize("defer", [False, True], ids=["now", "deferred"])
def test_an_ambient_correlation_id_longer_than_200_characters_is_a_value_error(
    defer: bool,
) -> None:
    with transaction.atomic():
        with correlation_scope("c" * (LONGEST + 1)), pytest.raises(ValueError, match="201"):
            publish(OrderPlaced("o-1"), defer=defer)

        assert nothing_written()
        still_usable()


def test_a_correlation_id_of_200_characters_is_carried() -> None:
    envelope = publish(OrderPlaced("o-1"), correlation_id="c" * LONGEST)

    assert envelope.correlation_id == "c" * LONGEST


def test_a_correlation_id_holding_a_nul_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="correlation id cannot be stored: str holds a NUL"):
        publish(OrderPlaced("o-1"), correlation_id="c\x00")

    assert nothing_written()


def test_a_key_longer_than_200_characters_is_a_value_error_where_it_is_computed() -> None:
    key = "k" * (LONGEST + 1)
    with transaction.atomic():
        with pytest.raises(ValueError, match="201 characters long") as raised:
            publish(OrderPlaced(key))

        assert "OrderFlow ('tests.order'), step 0" in str(raised.value)
        assert key not in str(raised.value)  # the length is named, never the key
        assert nothing_written()
        still_usable()


def test_a_key_of_200_characters_starts_an_instance() -> None:
    publish(OrderPlaced("k" * LONGEST))

    assert SagaInstance.objects.get().correlation_key == "k" * LONGEST


def test_a_deferred_event_with_a_key_too_long_fails_its_delivery_attempt() -> None:
    with transaction.atomic():
        envelope = publish(OrderPlaced("k" * (LONGEST + 1)), defer=True)  # keyed on delivery

    report = deliver_pending()

    assert report.failed == 1
    row = SagaOutboxMessage.objects.get(pk=envelope.message_id)
    assert (row.delivered_at, row.attempts) == (None, 1)
    assert "ValueError" in row.last_error
    assert "at most 200" in row.last_error
    assert not SagaInstance.objects.exists()
