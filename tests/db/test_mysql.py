"""The uniqueness bsft_saga relies on holds in the database itself, on every backend: on
PostgreSQL and SQLite through partial unique indexes, on MariaDB and MySQL through the unique
indexes over generated columns of migration 0003 (``bsft_saga.db.mysql``). The rows here are
written directly, as a concurrent process without the engine's checks would write them.

And what bsft_saga asks of a MariaDB or MySQL server: ``SKIP LOCKED`` (E003 names the
version found and the one needed) and READ COMMITTED (W004); and what every backend stores
alike (four-byte characters, the longest key, JSON state, the edges of the datetime range).
"""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction

from bsft_saga import checks, publish
from bsft_saga.db import datetimes, mysql
from bsft_saga.models import SagaInstance, SagaKeptEvent, SagaOutboxMessage, SagaTimeout
from tests.support.services import require_mysql_backend
from tests.support.timer_fixtures import T0
from tests.testapp.load_events import CountStarted
from tests.testapp.load_flows import CountingFlow
from tests.testapp.ops_flows import make_saga


def _instance(key: str, *, complete: bool = False, saga_type: str = "orders") -> SagaInstance:
    return make_saga(key, saga_type=saga_type, complete=complete, now=T0)


def _kept(key: str, message_id: uuid.UUID, saga: SagaInstance | None = None) -> SagaKeptEvent:
    return SagaKeptEvent.objects.create(
        saga=saga,
        saga_type="orders",
        correlation_key=key,
        step_index=1,
        event_type="orders.paid",
        payload={},
        message_id=message_id,
        kept_at=T0,
    )


@pytest.mark.django_db
def test_the_database_refuses_a_second_active_instance_of_a_key() -> None:
    _instance("A-1")

    with pytest.raises(IntegrityError), transaction.atomic():
        _instance("A-1")


@pytest.mark.django_db
def test_finished_instances_of_a_key_never_block_its_active_one() -> None:
    _instance("A-1", complete=True)
    _instance("A-1", complete=True)

    _instance("A-1")

    assert SagaInstance.objects.filter(correlation_key="A-1").count() == 3


@pytest.mark.django_db
def test_keys_that_differ_in_case_accents_or_trailing_spaces_are_different_keys() -> None:
    for key in ("a-1", "A-1", "a-1 ", "é-1", "e-1"):
        _instance(key)

    assert SagaInstance.objects.filter(correlation_key="A-1").count() == 1


@pytest.mark.django_db
def test_the_same_key_of_two_saga_types_is_two_keys() -> None:
    _instance("A-1", saga_type="orders")

    _instance("A-1", saga_type="invoices")


@pytest.mark.django_db
def test_the_database_refuses_a_second_event_kept_for_a_key_without_a_saga() -> None:
    message_id = uuid.uuid4()
    _kept("A-1", message_id)

    with pytest.raises(IntegrityError), transaction.atomic():
        _kept("A-1", message_id)


@pytest.mark.django_db
def test_an_event_kept_for_its_saga_does_not_count_against_the_key() -> None:
    message_id = uuid.uuid4()
    _kept("A-1", message_id)

    _kept("A-1", message_id, saga=_instance("A-1"))


@pytest.mark.django_db
def test_the_database_refuses_a_second_pending_timer_of_a_name_but_not_a_retired_one() -> None:
    saga = _instance("A-1")

    def timer(dispatched: bool) -> SagaTimeout:
        return SagaTimeout.objects.create(
            saga=saga,
            name="remind",
            due_at=T0,
            event_type="orders.remind",
            payload={},
            scheduled_step_index=1,
            scheduled_at=T0,
            dispatched_at=T0 if dispatched else None,
        )

    timer(dispatched=False)
    timer(dispatched=True)
    with pytest.raises(IntegrityError), transaction.atomic():
        timer(dispatched=False)


def _server(version: tuple[int, ...], *, mariadb: bool, skip_locked: bool = True) -> Any:
    return SimpleNamespace(
        vendor="mysql",
        display_name="MariaDB" if mariadb else "MySQL",
        mysql_version=version,
        mysql_is_mariadb=mariadb,
        features=SimpleNamespace(has_select_for_update_skip_locked=skip_locked),
        settings_dict={"OPTIONS": {}},
    )


@pytest.mark.parametrize(
    ("version", "mariadb", "found", "needed"),
    [
        ((10, 5, 27), True, "MariaDB 10.5.27", "MariaDB 10.6"),
        ((8, 0, 0), False, "MySQL 8.0.0", "MySQL 8.0.1"),
    ],
)
def test_e003_names_the_version_found_and_the_version_needed(
    monkeypatch: pytest.MonkeyPatch,
    version: tuple[int, ...],
    mariadb: bool,
    found: str,
    needed: str,
) -> None:
    server = _server(version, mariadb=mariadb, skip_locked=False)
    monkeypatch.setattr(checks, "connections", {"default": server})

    [error] = checks.check_partial_constraints(databases=["default"])

    assert error.id == "bsft_saga.E003"
    assert error.obj == "DATABASES['default']"
    assert error.msg.startswith(f"{found} has no SELECT ... FOR UPDATE SKIP LOCKED")
    assert f"{needed} or later is needed" in error.msg


def test_a_mariadb_without_skip_locked_is_refused_by_e003_alone_not_warned_of_by_w001_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = _server((10, 5, 27), mariadb=True, skip_locked=False)
    monkeypatch.setattr(checks, "connections", {"default": server})

    found = checks.check_partial_constraints(databases=["default"])
    found += checks.check_skip_locked(databases=["default"])

    assert [message.id for message in found] == ["bsft_saga.E003"]


@pytest.mark.parametrize(
    ("version", "mariadb"), [((10, 6, 0), True), ((11, 4, 2), True), ((8, 0, 11), False)]
)
def test_mariadb_10_6_and_mysql_8_pass_e003(
    monkeypatch: pytest.MonkeyPatch, version: tuple[int, ...], mariadb: bool
) -> None:
    monkeypatch.setattr(checks, "connections", {"default": _server(version, mariadb=mariadb)})

    assert checks.check_partial_constraints(databases=["default"]) == []


@pytest.mark.parametrize("level", ["repeatable read", "serializable", None])
def test_w004_names_the_option_of_an_isolation_level_that_breaks_the_version_checks(
    monkeypatch: pytest.MonkeyPatch, level: str | None
) -> None:
    server = _server((10, 11, 9), mariadb=True)
    server.settings_dict = {"OPTIONS": {"isolation_level": level}}
    monkeypatch.setattr(checks, "connections", {"replica": server})

    [warning] = checks.check_isolation_level(databases=["replica"])

    assert warning.id == "bsft_saga.W004"
    shown = "server default" if level is None else level
    assert warning.msg.startswith(
        f"DATABASES['replica']['OPTIONS']['isolation_level'] is {shown!r}"
    )


@pytest.mark.parametrize("options", [{}, {"isolation_level": "READ COMMITTED"}])
def test_read_committed_and_djangos_default_pass_w004(
    monkeypatch: pytest.MonkeyPatch, options: dict[str, str]
) -> None:
    server = _server((10, 11, 9), mariadb=True)
    server.settings_dict = {"OPTIONS": options}
    monkeypatch.setattr(checks, "connections", {"default": server})

    assert checks.check_isolation_level(databases=["default"]) == []


@pytest.mark.django_db
def test_the_models_raise_no_warning_about_what_migration_0003_provides_on_mysql() -> None:
    require_mysql_backend()
    models = (SagaInstance, SagaTimeout, SagaKeptEvent, SagaOutboxMessage)

    ids = {message.id for model in models for message in model.check(databases=["default"])}

    assert not ids & {"models.W036", "models.W037", "models.W043"}
    assert mysql.unsupported_version(connection) is None


# --- what MariaDB and MySQL store as PostgreSQL does ---------------------------------------
# utf8mb4 and the binary collations of migration 0003; run on every backend.

#: 200 characters of four bytes each (800 bytes): the longest key, within InnoDB's limit
#: of 3,072 bytes per index with the saga type beside it.
LONGEST_KEY = "\N{PILE OF POO}" * 199 + "x"


@pytest.mark.django_db(transaction=True)
def test_the_longest_key_of_four_byte_characters_starts_a_saga_and_reads_back_equal() -> None:
    publish(CountStarted(LONGEST_KEY))

    [saga] = SagaInstance.objects.filter(saga_type=CountingFlow.saga_type)
    assert saga.correlation_key == LONGEST_KEY
    assert SagaTimeout.objects.get(saga=saga).saga_id == saga.pk


@pytest.mark.django_db(transaction=True)
def test_a_key_longer_than_its_column_is_refused_at_publish_and_writes_nothing() -> None:
    with pytest.raises(ValueError, match="is 201 characters long; a correlation key holds"):
        publish(CountStarted("\N{PILE OF POO}" * 201))

    assert not SagaInstance.objects.exists()
    assert not SagaTimeout.objects.exists()


@pytest.mark.django_db
def test_state_reads_back_as_written() -> None:
    state = {
        "big": 2**63 - 1,
        "ratio": 0.1,
        "text": "Grüße \N{PILE OF POO} \u202e",
        "nested": [{"": None, "true": True}, []],
    }
    saga = SagaInstance.objects.create(
        saga_type="orders",
        correlation_key="A-1",
        state_type="tests.State",
        state=state,
        created_at=T0,
        updated_at=T0,
    )

    assert SagaInstance.objects.get(pk=saga.pk).state == state


@pytest.mark.django_db
def test_the_first_and_the_last_storable_moments_read_back_to_the_microsecond() -> None:
    saga = _instance("A-1")
    SagaInstance.objects.filter(pk=saga.pk).update(
        created_at=datetimes.EARLIEST, deadline=datetimes.LATEST
    )

    stored = SagaInstance.objects.get(pk=saga.pk)
    assert (stored.created_at, stored.deadline) == (datetimes.EARLIEST, datetimes.LATEST)


#: A UUID of version 8 with the RFC 4122 variant, as ``uuid.UUID(bytes=os.urandom(16))``
#: may give: MariaDB's UUID column refuses it.
VERSION_8 = uuid.UUID("55533a27-7824-8d3c-80a6-d532bc0f57b9")


@pytest.mark.django_db(transaction=True)
def test_a_message_id_the_database_cannot_store_is_refused_at_publish() -> None:
    if connection.vendor != "mysql" or not connection.features.has_native_uuid_field:
        publish(CountStarted("A-1"), message_id=VERSION_8)  # stored as any 128 bits
        assert SagaInstance.objects.filter(correlation_key="A-1").exists()
        return

    with pytest.raises(ValueError, match="MariaDB's UUID column refuses UUID version 8"):
        publish(CountStarted("A-1"), message_id=VERSION_8)

    assert not SagaInstance.objects.exists()
