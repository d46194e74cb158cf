"""The Python examples of a docs page, and a fresh interpreter to run them in.

A fresh one, so that what an example configures (the global OpenTelemetry providers,
``logging.config.dictConfig``) cannot disturb the test process.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def docs_examples(page: str, *markers: str) -> str:
    """The ```python blocks of ``docs/<page>`` that contain each of ``markers`` (the one
    block for each, in the order of the markers), joined into one script."""
    text = (ROOT / "docs" / page).read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    found = []
    for marker in markers:
        [block] = [b for b in blocks if marker in b]
        found.append(block)
    return "".join(found)


def run_python(script: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in a fresh interpreter (warnings are errors) from the repository root."""
    return subprocess.run(
        [sys.executable, "-W", "error", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
