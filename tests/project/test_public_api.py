"""The names of ``bsft_saga.__all__`` resolve; ``import bsft_saga`` is safe before settings."""

from __future__ import annotations

import subprocess
import sys

import pytest

import bsft_saga

PUBLIC = {
    "Envelope",
    "PublishDepthExceeded",
    "PublishOutcome",
    "Published",
    "SagaContext",
    "SagaFlow",
    "UnknownEventType",
    "UnknownFlowVersion",
    "__version__",
    "apublish",
    "apublish_many",
    "deadline_exceeded",
    "event",
    "publish",
    "publish_many",
}


def test_every_public_name_is_exported_and_resolves() -> None:
    assert set(bsft_saga.__all__) == PUBLIC
    for name in PUBLIC:
        assert getattr(bsft_saga, name) is not None


def test_an_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        bsft_saga.no_such_name  # noqa: B018


def test_events_can_be_declared_before_django_is_configured() -> None:
    # An app's events module is often imported while settings load: it must not need them.
    code = (
        "from dataclasses import dataclass\n"
        "from bsft_saga import event, Envelope\n"
        "@event('early.declared')\n"
        "@dataclass(frozen=True)\n"
        "class Early:\n"
        "    key: str\n"
        "from django.conf import settings\n"
        "assert not settings.configured\n"
        "print('ok')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "", "PYTHONPATH": ""},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
