"""The wheel users install carries everything the source tree relies on.

Builds the wheel from a copy of the repository, installs it into a brand-new virtualenv
(dependencies resolved by pip as a user's would be) and inspects the installed package from
outside the source tree: a migration or ``py.typed`` missing from the package data, or a
version that disagrees with the source, fails here rather than on a user's machine.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

import pytest

import bsft_saga

ROOT = Path(__file__).resolve().parents[2]

# Building and installing takes a while and does not depend on the database backend, so
# `make test` does it once, in its SQLite run.
_ON_A_SERVER = os.environ.get("DATABASE_URL", "").startswith(("postgres", "pgsql", "mysql"))

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        _ON_A_SERVER,
        reason="packaging is backend-independent: checked once, in the SQLite run of make test",
    ),
    pytest.mark.timeout(900),
]

# Top-level entries of the checkout that have no business in a build context.
_NOT_COPIED = {
    ".git",
    ".venv",
    ".tox",
    "build",
    "dist",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    ".hypothesis",
}

# Runs in the clean virtualenv with -I (isolated mode: no PYTHONPATH, no cwd on sys.path),
# so it can only see the installed copy of bsft_saga.
_PROBE = """
import importlib.metadata as metadata
import importlib.resources as resources
import json
import bsft_saga


def testing_hint():
    # A plain install has no freezegun: the harness must say which extra brings it.
    try:
        import bsft_saga.testing
    except ModuleNotFoundError as exc:
        return str(exc)
    return None


package = resources.files("bsft_saga")
print(json.dumps({
    "file": bsft_saga.__file__,
    "version": bsft_saga.__version__,
    "metadata_version": metadata.version("bsft-saga"),
    "has_initial_migration": package.joinpath("migrations", "0001_initial.py").is_file(),
    "has_py_typed": package.joinpath("py.typed").is_file(),
    "pytest_plugins": sorted(
        ep.value for ep in metadata.entry_points(group="pytest11") if ep.name == "bsft_saga"
    ),
    "has_admin_templates": package.joinpath(
        "templates", "admin", "bsft_saga", "app_index.html"
    ).is_file(),
    "testing_extra": sorted(
        requirement.split(";")[0].split(">")[0].strip()
        for requirement in metadata.requires("bsft-saga") or []
        if 'extra == "testing"' in requirement
    ),
    "testing_hint": testing_hint(),
}))
"""


def _run(command: Sequence[str | Path], *, cwd: Path, env: dict[str, str]) -> str:
    """Run a command and return its stdout; any non-zero exit fails the test with its output."""
    argv = [str(part) for part in command]
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        pytest.fail(
            f"command failed with exit code {result.returncode}: {' '.join(argv)}\n"
            f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}",
            pytrace=False,
        )
    return result.stdout


def _clean_env() -> dict[str, str]:
    """Return the environment without anything that would point Python at the source tree."""
    env = dict(os.environ)
    for name in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "DJANGO_SETTINGS_MODULE"):
        env.pop(name, None)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _ignore_for_copy(directory: str, names: list[str]) -> set[str]:
    ignored = {name for name in names if name == "__pycache__" or name.endswith(".egg-info")}
    ignored |= {name for name in names if name.endswith((".sqlite3", ".pyc"))}
    if Path(directory).resolve() == ROOT:
        ignored |= {name for name in names if name in _NOT_COPIED or name.startswith(".venv")}
    return ignored


def test_installed_wheel_contains_migrations_py_typed_and_the_source_version(
    tmp_path: Path,
) -> None:
    env = _clean_env()
    source_version = bsft_saga.__version__
    assert Path(bsft_saga.__file__).resolve().is_relative_to(ROOT), (
        "the test process must import bsft_saga from the checkout it is building"
    )
    assert (ROOT / "bsft_saga" / "migrations" / "0001_initial.py").is_file(), (
        "the source tree has no initial migration to package"
    )

    # Build from a copy, so the build leaves no build/ or *.egg-info behind in the checkout.
    # --no-isolation uses this venv's setuptools and wheel (installed by `make venv`) instead
    # of downloading them into a throwaway build environment.
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=_ignore_for_copy)
    dist = tmp_path / "dist"
    _run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", dist, source],
        cwd=source,
        env=env,
    )
    wheels = sorted(dist.glob("*.whl"))
    assert len(wheels) == 1, f"expected exactly one wheel in {dist}, found {wheels}"
    wheel = wheels[0]
    assert wheel.name == f"bsft_saga-{source_version}-py3-none-any.whl"

    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert "bsft_saga/migrations/0001_initial.py" in names
    assert "bsft_saga/py.typed" in names
    stray = sorted({name.split("/", 1)[0] for name in names} - {"bsft_saga"})
    assert all(re.fullmatch(r"bsft_saga-.+\.dist-info", name) for name in stray), (
        f"the wheel ships top-level entries besides bsft_saga: {stray}"
    )

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", venv], cwd=tmp_path, env=env)
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    _run([python, "-m", "pip", "install", "--quiet", wheel], cwd=tmp_path, env=env)

    probe_cwd = tmp_path / "elsewhere"
    probe_cwd.mkdir()
    output = _run([python, "-I", "-c", _PROBE], cwd=probe_cwd, env=env)
    installed = json.loads(output.strip().splitlines()[-1])

    assert Path(installed["file"]).resolve().is_relative_to(venv.resolve()), (
        f"bsft_saga was imported from {installed['file']}, not from the clean virtualenv"
    )
    assert installed["version"] == source_version
    assert installed["metadata_version"] == source_version
    assert installed["has_initial_migration"] is True
    assert installed["has_py_typed"] is True
    assert installed["pytest_plugins"] == ["bsft_saga.pytest_plugin"]
    assert installed["has_admin_templates"] is True
    assert installed["testing_extra"] == ["freezegun", "pytest-django"]
    assert "pip install 'bsft-saga[testing]'" in installed["testing_hint"]
