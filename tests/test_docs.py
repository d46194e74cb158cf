"""The documentation stays usable: its Python examples are valid and every page is linked.

The examples' behaviour is exercised by the tests each page names in an HTML comment; this
module only guards what no behaviour test would notice.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PYTHON_BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def python_blocks() -> list[tuple[str, str]]:
    blocks = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in PYTHON_BLOCK.finditer(text):
            line = text[: match.start()].count("\n") + 2
            blocks.append((f"{page.relative_to(ROOT)}:{line}", match.group(1)))
    return blocks


@pytest.mark.parametrize(("where", "code"), python_blocks(), ids=lambda value: value[:60])
def test_every_python_example_in_the_docs_compiles(where: str, code: str) -> None:
    compile(code, where, "exec")


def test_the_readme_links_every_docs_page() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    missing = [
        page.name
        for page in sorted((ROOT / "docs").glob("*.md"))
        if f"docs/{page.name}" not in readme
    ]
    assert missing == []


def test_relative_links_between_pages_resolve() -> None:
    broken = []
    for page in PAGES:
        for target in re.findall(
            r"\]\(([^)#:]+\.md)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")
        ):
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert broken == []


def test_the_readme_opens_with_the_two_commands() -> None:
    opening = "\n".join((ROOT / "README.md").read_text(encoding="utf-8").splitlines()[:15])
    assert "make demo" in opening
    assert "make test" in opening
