"""Suite-wide fixtures. Service checks live in tests/support/services.py."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

import tests.celery_app  # noqa: F401  (the default Celery app of the test process)

ROOT = Path(__file__).resolve().parent.parent

pytest_plugins = ["tests.support.timer_fixtures", "tests.support.celery_workers"]

settings.register_profile(
    "default", deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
settings.load_profile("default")


#: Each server backend's URL scheme, and the user and port its URL leaves out.
_SERVER_URLS = {"mysql": ("mysql", "root", 3306), "postgresql": ("postgres", "postgres", 5432)}


def database_url_of(settings_dict: dict[str, Any]) -> str:
    """A DATABASE_URL for the database a test is using (the *test* database)."""
    backend = settings_dict["ENGINE"].rsplit(".", 1)[-1]
    if backend == "sqlite3":
        return f"sqlite:///{settings_dict['NAME']}"
    scheme, default_user, default_port = _SERVER_URLS[backend]
    user = settings_dict.get("USER") or default_user
    host = settings_dict.get("HOST") or "127.0.0.1"
    port = settings_dict.get("PORT") or default_port
    return f"{scheme}://{user}@{host}:{port}/{settings_dict['NAME']}"


@pytest.fixture
def subprocess_env(transactional_db: Any) -> dict[str, str]:
    """Environment for a child Python process that shares this test's database.

    Transactional, so that what the test writes is committed and visible to the child.
    """
    from django.db import connection

    env = dict(os.environ)
    env["DATABASE_URL"] = database_url_of(connection.settings_dict)
    env["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.fixture
def python() -> str:
    return sys.executable
