"""Audit recorders: the default model recorder, building the configured one, and check E030."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.auth.models import AnonymousUser, User
from django.core.checks import run_checks
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings
from freezegun import freeze_time

from bsft_saga.audit import READ_CONTENT, AuditRecorder, ModelAuditRecorder, get_audit_recorder
from bsft_saga.checks import check_audit_recorder
from bsft_saga.correlation import correlation_scope
from bsft_saga.models import SagaAuditRecord

READ = "bsft_saga.read_saga_content"
T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)


def _record(user: Any, **overrides: Any) -> SagaAuditRecord:
    arguments: dict[str, Any] = {
        "action": READ_CONTENT,
        "user": user,
        "saga_type": "tests.order",
        "correlation_key": "o-1",
        "instance_id": uuid.uuid4(),
        **overrides,
    }
    ModelAuditRecorder().record(**arguments)
    return SagaAuditRecord.objects.get(instance_id=arguments["instance_id"])


def _api(**options: Any) -> dict[str, Any]:
    return {"API": options}


class NotARecorder:
    """Has no ``record`` method."""


# --- ModelAuditRecorder -----------------------------------------------------------------


@pytest.mark.django_db
def test_model_recorder_stores_what_was_read_by_whom_and_when() -> None:
    user = User.objects.create_user("alice")
    instance_id = uuid.uuid4()

    with freeze_time(T0):
        record = _record(user, instance_id=instance_id)

    assert record.action == "saga.instance.read-content"
    assert record.user == user
    assert record.username == "alice"
    assert record.saga_type == "tests.order"
    assert record.correlation_key == "o-1"
    assert record.instance_id == instance_id
    assert record.recorded_at == T0


@pytest.mark.django_db
def test_model_recorder_keeps_the_record_when_the_user_is_deleted() -> None:
    user = User.objects.create_user("alice")
    record = _record(user)

    user.delete()

    record.refresh_from_db()
    assert record.user is None
    assert record.username == "alice"


@pytest.mark.django_db
def test_model_recorder_records_the_ambient_correlation_id() -> None:
    user = User.objects.create_user("alice")

    with correlation_scope("req-42"):
        inside = _record(user)
    outside = _record(user)

    assert inside.correlation_id == "req-42"
    assert outside.correlation_id == ""


@pytest.mark.django_db
def test_model_recorder_stores_a_missing_correlation_key_as_empty() -> None:
    record = _record(User.objects.create_user("alice"), correlation_key=None)

    assert record.correlation_key == ""


@pytest.mark.django_db
@pytest.mark.parametrize("user", [None, AnonymousUser()], ids=["none", "anonymous"])
def test_model_recorder_records_an_unauthenticated_reader_without_a_user(user: Any) -> None:
    record = _record(user)

    assert record.user is None
    assert record.username == ""


# --- get_audit_recorder -----------------------------------------------------------------


def test_the_default_recorder_is_the_model_recorder() -> None:
    assert isinstance(get_audit_recorder(), ModelAuditRecorder)


def test_a_configured_recorder_class_is_built() -> None:
    with override_settings(BSFT_SAGA=_api(AUDIT_RECORDER="tests.api.test_api.ListRecorder")):
        recorder = get_audit_recorder()

    assert type(recorder).__qualname__ == "ListRecorder"
    assert isinstance(recorder, AuditRecorder)


def test_no_recorder_when_audit_recorder_is_none() -> None:
    with override_settings(BSFT_SAGA=_api(AUDIT_RECORDER=None)):
        assert get_audit_recorder() is None


@pytest.mark.parametrize(
    "path", ["tests.no_such_module.Recorder", "tests.admin.test_audit.NoSuchClass"]
)
def test_an_unimportable_recorder_is_improperly_configured(path: str) -> None:
    with (
        override_settings(BSFT_SAGA=_api(AUDIT_RECORDER=path)),
        pytest.raises(ImproperlyConfigured, match="AUDIT_RECORDER"),
    ):
        get_audit_recorder()


def test_a_class_without_record_is_improperly_configured() -> None:
    with (
        override_settings(BSFT_SAGA=_api(AUDIT_RECORDER="tests.admin.test_audit.NotARecorder")),
        pytest.raises(ImproperlyConfigured, match="record"),
    ):
        get_audit_recorder()


# --- check E030 -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "recorder",
    [None, "tests.no_such_module.Recorder", "tests.admin.test_audit.NotARecorder"],
    ids=["none", "unimportable", "no-record-method"],
)
def test_e030_when_content_is_served_without_a_usable_recorder(recorder: str | None) -> None:
    with override_settings(BSFT_SAGA=_api(READ_CONTENT_PERMISSION=READ, AUDIT_RECORDER=recorder)):
        messages = check_audit_recorder()

    assert [m.id for m in messages] == ["bsft_saga.E030"]
    assert messages[0].hint


@pytest.mark.parametrize(
    "api",
    [
        {"READ_CONTENT_PERMISSION": READ},
        {"READ_CONTENT_PERMISSION": READ, "AUDIT_RECORDER": "tests.api.test_api.ListRecorder"},
        {"READ_CONTENT_PERMISSION": None, "AUDIT_RECORDER": None},
        {"READ_CONTENT_PERMISSION": None, "AUDIT_RECORDER": "tests.no_such_module.Recorder"},
        {},
    ],
    ids=["default-recorder", "custom-recorder", "no-content-no-recorder", "no-content", "defaults"],
)
def test_no_e030_otherwise(api: dict[str, Any]) -> None:
    with override_settings(BSFT_SAGA=_api(**api)):
        assert check_audit_recorder() == []


def test_e030_is_reported_by_manage_py_check() -> None:
    with override_settings(BSFT_SAGA=_api(READ_CONTENT_PERMISSION=READ, AUDIT_RECORDER=None)):
        ids = [message.id for message in run_checks()]

    assert "bsft_saga.E030" in ids
