"""``pytest --durations`` reports real time while a test has frozen or moved the clock.

The bsft_saga pytest plugin puts pytest's timing module on freezegun's ignore list; without
it, a test whose fixture freezes time is reported as lasting decades (setup) or as long as
it moved the clock (call). Checked in a child pytest that loads the plugin like any
project's would, through its entry point.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

FROZEN_TESTS = """
import time

import pytest
from freezegun import freeze_time


@pytest.fixture
def frozen():
    with freeze_time("2020-01-01") as frozen:
        yield frozen


def test_moves_the_clock_by_a_day(frozen):
    frozen.tick(86_400)
    time.sleep(0.01)
"""


def test_durations_are_real_while_a_fixture_freezes_time(tmp_path: Path) -> None:
    (tmp_path / "test_frozen.py").write_text(FROZEN_TESTS, encoding="utf-8")
    env = {name: value for name, value in os.environ.items() if name != "PYTEST_ADDOPTS"}
    result = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "test_frozen.py", "--durations=0", "-vv"),
            *("-p", "no:django", "-p", "no:cacheprovider"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert result.returncode == 0, result.stdout + result.stderr
    durations = {
        phase: float(seconds)
        for seconds, phase in re.findall(r"^([\d.]+)s (setup|call|teardown) ", result.stdout, re.M)
    }
    assert set(durations) == {"setup", "call", "teardown"}, result.stdout
    assert max(durations.values()) < 60, result.stdout
