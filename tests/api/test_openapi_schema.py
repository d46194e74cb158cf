"""The OpenAPI document generates without a warning or an error, and is a valid document.

drf-spectacular reports what it cannot document (a serializer field it cannot type, an
``@extend_schema`` it cannot apply) on stderr and carries on, with a document that quietly
lies to API clients. So the document is generated the way a project would generate it,
``manage.py spectacular --fail-on-warn --validate``, in a child process: some of those
messages are printed while the views module is imported, once per process, and the child
imports it fresh. Anything on its stderr fails the test, and the document it wrote is
validated again against the OpenAPI specification by openapi-spec-validator.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from openapi_spec_validator import validate
from rest_framework.test import APIClient

ROOT = Path(__file__).resolve().parents[2]

# The test settings set up as a project that documents its API with drf-spectacular: its
# app (which brings the `spectacular` command) and its AutoSchema as DRF's default.
SETTINGS = """
from tests.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "drf_spectacular"]  # noqa: F405
REST_FRAMEWORK = {"DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema"}
"""


def _generate(tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    (tmp_path / "spectacular_settings.py").write_text(SETTINGS, encoding="utf-8")
    document = tmp_path / "openapi.json"
    env = dict(os.environ)
    env["DJANGO_SETTINGS_MODULE"] = "spectacular_settings"
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT)])
    # Nothing is read or written: any database will do, and none is created.
    env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'unused.sqlite3'}"
    command = [
        *(sys.executable, "-m", "django", "spectacular"),
        *("--fail-on-warn", "--validate", "--format", "openapi-json", "--file", str(document)),
    ]
    result = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    return result, document


def test_the_openapi_document_generates_without_warnings_and_is_valid(tmp_path: Path) -> None:
    result, path = _generate(tmp_path)

    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    document = json.loads(path.read_text(encoding="utf-8"))
    validate(document)
    operation_ids = sorted(
        operation["operationId"]
        for route in document["paths"].values()
        for operation in route.values()
    )
    assert "saga_status" in operation_ids
    assert len(operation_ids) == len(set(operation_ids)), operation_ids


def test_the_served_document_is_valid_and_names_the_status_operation() -> None:
    response = APIClient().get("/api/sagas/schema/", {"format": "json"})

    assert response.status_code == 200
    document = response.json()
    validate(document)
    assert document["paths"]["/status/"]["get"]["operationId"] == "saga_status"
