from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection


@pytest.mark.django_db
def test_models_and_migrations_are_in_sync() -> None:
    out = StringIO()
    call_command("makemigrations", "bsft_saga", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()


@pytest.mark.django_db
def test_pending_timer_names_are_unique_through_a_partial_constraint() -> None:
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, "bsft_saga_sagatimeout")
    constraint = constraints["bsft_saga_one_pending_timeout_name"]
    assert constraint["unique"]
    assert constraint["columns"] == ["saga_id", "name"]


@pytest.mark.django_db
def test_one_active_instance_per_key_is_a_partial_constraint() -> None:
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, "bsft_saga_sagainstance")
    constraint = constraints["bsft_saga_one_active_instance_per_key"]
    assert constraint["unique"]
    assert constraint["columns"] == ["saga_type", "correlation_key"]
