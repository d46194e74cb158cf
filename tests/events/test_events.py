"""The ``@event`` registry, ``publish()`` and the envelope every event travels in."""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.dispatch import receiver
from freezegun import freeze_time

from bsft_saga import Envelope, UnknownEventType, event, publish
from bsft_saga.correlation import correlation_scope, get_correlation_id
from bsft_saga.events import event_class, event_type_of
from bsft_saga.events import registry as registry_module
from bsft_saga.events.registry import EventRegistry, known_event_types
from bsft_saga.models import SagaInstance, SagaOutboxMessage
from bsft_saga.outbox import envelope_of
from bsft_saga.signals import event_published
from tests.support.receivers import receiving
from tests.testapp.engine_events import Unrouted
from tests.testapp.events import OrderPlaced
from tests.testapp.flows import OrderFlow
from tests.testapp.parcel_events import CollectionDue

NOW = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)


class NotAnEvent:
    pass


@dataclass(frozen=True)
class UndecoratedEvent:
    note: str = ""


# --- the registry ---------------------------------------------------------------------


def test_an_event_class_is_known_by_its_declared_name() -> None:
    assert event_type_of(OrderPlaced) == "tests.order.placed"
    assert event_type_of(OrderPlaced("o-1")) == "tests.order.placed"
    assert event_class("tests.order.placed") is OrderPlaced


def test_an_alias_decodes_to_its_class_whose_type_stays_the_primary_name() -> None:
    assert event_class("tests.parcel.pickup-due") is CollectionDue
    assert event_class("tests.parcel.collection-due") is CollectionDue
    assert event_type_of(CollectionDue("p-1")) == "tests.parcel.collection-due"


def test_every_name_and_alias_is_a_known_event_type() -> None:
    known = known_event_types()
    assert {"tests.parcel.collection-due", "tests.parcel.pickup-due", "tests.order.placed"} <= known
    assert "tests.orders.renamed-away" not in known


@pytest.fixture
def fresh_registry(monkeypatch: pytest.MonkeyPatch) -> EventRegistry:
    """An empty registry for ``@event`` declarations that must not leak into the suite."""
    registry = EventRegistry()
    monkeypatch.setattr(registry_module, "event_registry", registry)
    return registry


def test_a_second_class_under_a_taken_name_does_not_raise_and_the_first_keeps_it(
    fresh_registry: EventRegistry,
) -> None:
    @event("tests.events.placed")
    @dataclass(frozen=True)
    class Placed:
        order_id: str

    @event("tests.events.placed")
    @dataclass(frozen=True)
    class ImpostorPlaced:
        order_id: str

    assert event_class("tests.events.placed") is Placed
    [conflict] = fresh_registry.conflicts()
    assert conflict.name == "tests.events.placed"
    assert conflict.kept_by.endswith("Placed")
    assert "Impostor" not in conflict.kept_by
    assert conflict.claimed_by.endswith("ImpostorPlaced")
    assert conflict.claimed_as == "name"


def test_an_alias_taken_by_another_class_stays_with_that_class(
    fresh_registry: EventRegistry,
) -> None:
    @event("tests.events.shipped")
    @dataclass(frozen=True)
    class Shipped:
        order_id: str

    @event("tests.events.dispatched", aliases=("tests.events.shipped",))
    @dataclass(frozen=True)
    class Dispatched:
        order_id: str

    assert event_class("tests.events.shipped") is Shipped
    assert event_class("tests.events.dispatched") is Dispatched
    [conflict] = fresh_registry.conflicts()
    assert (conflict.name, conflict.claimed_as) == ("tests.events.shipped", "alias")


def test_declaring_the_same_class_again_is_not_a_conflict(fresh_registry: EventRegistry) -> None:
    def declare() -> type:
        @event("tests.events.reloaded", aliases=("tests.events.loaded",))
        @dataclass(frozen=True)
        class Reloaded:
            order_id: str

        return Reloaded

    declare()
    again = declare()  # a module imported twice defines the class twice

    assert event_class("tests.events.loaded") is again
    assert fresh_registry.conflicts() == ()


@pytest.mark.parametrize(
    ("aliases", "error", "message"),
    [
        ("tests.events.old", TypeError, r"aliases=\('tests\.events\.old',\)"),
        (("",), ValueError, "every alias must be a non-empty name"),
        (("tests.events.new",), ValueError, "only once"),
        (("tests.events.old", "tests.events.old"), ValueError, "only once"),
    ],
    ids=["a-bare-string", "an-empty-alias", "the-primary-name", "an-alias-twice"],
)
def test_bad_aliases_are_refused_at_decoration(
    fresh_registry: EventRegistry, aliases: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        event("tests.events.new", aliases=aliases)


def test_a_class_that_is_not_a_dataclass_is_refused_at_decoration() -> None:
    with pytest.raises(TypeError, match="dataclass"):

        @event("tests.events.not-a-dataclass")
        class Plain:
            order_id: str = ""

    with pytest.raises(UnknownEventType):
        event_class("tests.events.not-a-dataclass")


def test_a_field_the_codec_cannot_store_is_refused_at_decoration() -> None:
    with pytest.raises(TypeError, match=r"Attachment\.content.*bytes"):

        @event("tests.events.attachment")
        @dataclass(frozen=True)
        class Attachment:
            content: bytes

    with pytest.raises(UnknownEventType):
        event_class("tests.events.attachment")


def test_an_empty_event_name_is_refused() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        event(" ")


# --- publish() ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "not_an_event",
    [NotAnEvent(), UndecoratedEvent(), "orders.placed", OrderPlaced],
    ids=["plain-object", "undecorated-dataclass", "str", "event-class-not-instance"],
)
def test_publishing_something_that_is_not_an_event_instance_is_a_type_error(
    not_an_event: Any,
) -> None:
    with receiving(OrderPlaced) as received, pytest.raises(TypeError):
        publish(not_an_event)
    assert received == []


def test_a_payload_that_does_not_fit_its_fields_is_a_type_error_at_publish_time() -> None:
    with receiving(Unrouted) as received, pytest.raises(TypeError, match=r"Unrouted\.note"):
        publish(Unrouted(note=42))  # type: ignore[arg-type]
    assert received == []


@pytest.mark.django_db
def test_a_deferred_payload_that_does_not_fit_is_a_type_error_and_writes_no_row() -> None:
    with pytest.raises(TypeError, match=r"OrderPlaced\.total"):
        publish(OrderPlaced("o-1", total=1.5), defer=True)  # type: ignore[arg-type]
    assert not SagaOutboxMessage.objects.exists()


def test_publish_returns_the_envelope_it_sent() -> None:
    with receiving(Unrouted) as received:
        envelope = publish(Unrouted("hello"))
    assert isinstance(envelope, Envelope)
    assert received == [envelope]
    assert received[0] is envelope


def test_the_envelope_carries_the_documented_fields() -> None:
    payload = Unrouted("hello")
    with freeze_time(NOW):
        envelope = publish(payload)
    assert [f.name for f in dataclasses.fields(Envelope)][:7] == [
        "message_id",
        "event",
        "event_type",
        "correlation_id",
        "causation_id",
        "deadline",
        "published_at",
    ]
    assert isinstance(envelope.message_id, uuid.UUID)
    assert envelope.event is payload
    assert envelope.event_type == "tests.engine.unrouted"
    assert envelope.correlation_id is not None  # fresh: none was given or ambient
    assert envelope.causation_id is None
    assert envelope.deadline is None
    assert envelope.published_at == NOW


def test_an_envelope_is_immutable() -> None:
    envelope = publish(Unrouted())
    with pytest.raises(dataclasses.FrozenInstanceError):
        envelope.correlation_id = "changed"  # type: ignore[misc]


def test_every_publish_gets_a_fresh_message_id() -> None:
    assert publish(Unrouted()).message_id != publish(Unrouted()).message_id


def test_a_given_message_id_is_kept_and_may_be_a_string() -> None:
    message_id = uuid.uuid4()
    assert publish(Unrouted(), message_id=message_id).message_id == message_id
    assert publish(Unrouted(), message_id=str(message_id)).message_id == message_id


def test_the_correlation_id_defaults_to_the_ambient_one() -> None:
    with correlation_scope("req-42"):
        envelope = publish(Unrouted())
    assert envelope.correlation_id == "req-42"


def test_an_explicit_correlation_id_wins_over_the_ambient_one() -> None:
    with correlation_scope("req-42"):
        envelope = publish(Unrouted(), correlation_id="batch-7")
    assert envelope.correlation_id == "batch-7"


def test_receivers_run_under_the_envelopes_correlation_id(record: Any) -> None:
    received = record(Unrouted)

    publish(Unrouted(), correlation_id="batch-7")

    assert received.ambient_correlation_ids == ["batch-7"]
    assert get_correlation_id() is None


def test_an_aware_deadline_rides_the_envelope() -> None:
    deadline = NOW + timedelta(hours=1)
    assert publish(Unrouted(), deadline=deadline).deadline == deadline


def test_a_naive_deadline_is_a_value_error() -> None:
    with receiving(Unrouted) as received, pytest.raises(ValueError, match="aware"):
        publish(Unrouted(), deadline=datetime(2026, 3, 2, 10, 0))
    assert received == []


@pytest.mark.django_db
def test_a_plain_receiver_runs_alongside_the_saga_that_awaits_the_same_event() -> None:
    calls: list[Envelope] = []

    @receiver(event_published, sender=OrderPlaced, weak=False, dispatch_uid="test-plain-order")
    def on_order_placed(sender: type, *, envelope: Envelope, **kwargs: Any) -> None:
        calls.append(envelope)

    try:
        envelope = publish(OrderPlaced("o-1", total=Decimal("12.50")))
    finally:
        event_published.disconnect(sender=OrderPlaced, dispatch_uid="test-plain-order")
    assert calls == [envelope]
    assert SagaInstance.objects.for_key(OrderFlow.saga_type, "o-1").count() == 1


class ReceiverFailed(Exception):
    pass


def test_an_exception_in_a_receiver_propagates_to_the_publisher() -> None:
    def failing(sender: type, **kwargs: Any) -> None:
        raise ReceiverFailed("inventory service down")

    event_published.connect(failing, sender=Unrouted, weak=False)
    try:
        with pytest.raises(ReceiverFailed, match="inventory service down"):
            publish(Unrouted())
    finally:
        event_published.disconnect(failing, sender=Unrouted)


# --- reading stored rows back ---------------------------------------------------------


@pytest.mark.django_db
def test_a_stored_row_is_read_back_as_its_registered_class() -> None:
    row = SagaOutboxMessage.objects.create(
        event_type="tests.order.placed",
        payload={"order_id": "o-1", "total": "9.90"},
        correlation_id="req-1",
        created_at=NOW,
    )
    envelope = envelope_of(row)
    assert envelope.event == OrderPlaced("o-1", total=Decimal("9.90"))
    assert envelope.message_id == row.pk
    assert envelope.correlation_id == "req-1"


@pytest.mark.django_db
def test_a_row_stored_under_an_alias_is_read_back_under_the_primary_name() -> None:
    row = SagaOutboxMessage.objects.create(
        event_type="tests.parcel.pickup-due", payload={"parcel_id": "p-1"}, created_at=NOW
    )
    envelope = envelope_of(row)
    assert envelope.event == CollectionDue("p-1")
    assert envelope.event_type == "tests.parcel.collection-due"


@pytest.mark.django_db
def test_an_unregistered_type_name_read_back_is_unknown_event_type_naming_it() -> None:
    row = SagaOutboxMessage.objects.create(
        event_type="tests.orders.renamed-away", payload={}, created_at=NOW
    )
    with pytest.raises(UnknownEventType) as raised:
        envelope_of(row)
    assert raised.value.event_type == "tests.orders.renamed-away"
    assert "tests.orders.renamed-away" in str(raised.value)


@pytest.mark.parametrize(
    ("name", "aliases"),
    [("tests.events." + "n" * 200, ()), ("tests.events.short", ("tests.events." + "a" * 200,))],
    ids=["name", "alias"],
)
def test_a_type_name_longer_than_the_stored_column_is_refused_at_decoration(
    fresh_registry: EventRegistry, name: str, aliases: tuple[str, ...]
) -> None:
    # Every publish would otherwise fail on PostgreSQL (a 200-character column).
    with pytest.raises(
        ValueError, match="characters long; timers and outbox rows store at most 200"
    ):
        event(name, aliases=aliases)


def test_a_type_name_of_200_characters_is_accepted(fresh_registry: EventRegistry) -> None:
    name = "tests.events." + "n" * (200 - len("tests.events."))

    @event(name)
    @dataclass(frozen=True)
    class Long:
        pass

    assert event_type_of(Long) == name
