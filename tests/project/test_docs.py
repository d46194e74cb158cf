"""The documentation stays usable: its Python examples are valid and every page is linked.

The examples' behaviour is exercised by the tests each page names in an HTML comment; this
module only guards what no behaviour test would notice.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
HOW_TO = sorted((ROOT / "docs" / "operations").glob("*.md"))
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


def test_the_operations_page_links_every_how_to_page() -> None:
    index = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    assert HOW_TO
    assert [page.name for page in HOW_TO if f"](operations/{page.name})" not in index] == []


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


REFERENCE = sorted((ROOT / "docs" / "reference").glob("*.md"))
# "::: dotted.path" and the indented options below it (a module's "members:" list).
DIRECTIVE = re.compile(r"^::: ([\w.]+)\n((?:    .*\n)*)", re.M)
IMPORT = re.compile(r"from (bsft_saga[\w.]*) import ([\w, ]+)")
CALL = re.compile(r"`(bsft_saga(?:\.\w+)+)\(")


def _resolve(dotted: str) -> object:
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for part in parts[split:]:
            found = getattr(found, part)
        return found
    raise ImportError(dotted)


def _documented() -> list[object]:
    """Every object the reference pages render: each "::: name", and a module's members."""
    found = []
    for page in REFERENCE:
        for dotted, options in DIRECTIVE.findall(page.read_text(encoding="utf-8")):
            target = _resolve(dotted)
            found.append(target)
            if inspect.ismodule(target):
                members = re.findall(r"^\s+- (\w+)$", options, re.M)
                names = members or [name for name in vars(target) if not name.startswith("_")]
                found += [getattr(target, name) for name in names]
    return found


def told_to_use() -> list[tuple[str, str]]:
    """(where, dotted name) of each name users are told to import or call: the package's
    ``__all__``, every ``from bsft_saga... import`` and every `bsft_saga.x.y()` of the pages."""
    import bsft_saga

    names = [("bsft_saga.__all__", f"bsft_saga.{name}") for name in bsft_saga.__all__]
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        where = str(page.relative_to(ROOT))
        for module, imported in IMPORT.findall(text):
            names += [(where, f"{module}.{name.strip()}") for name in imported.split(",")]
        names += [(where, dotted) for dotted in CALL.findall(text)]
    return sorted({(where, name) for where, name in names if not name.endswith(".__version__")})


def _is_documented(target: object, documented: list[object]) -> bool:
    if inspect.ismethod(target):  # flow_registry.get: its registry is documented
        target = target.__self__
    if any(target is shown for shown in documented):
        return True
    # A module is covered by what the reference shows of it (bsft_saga.clock: its now()),
    # a package by what it shows of its modules (bsft_saga.outbox: outbox.passes.deliver_pending).
    if not inspect.ismodule(target):
        return False
    modules = [getattr(shown, "__module__", None) or "" for shown in documented]
    return any(m == target.__name__ or m.startswith(f"{target.__name__}.") for m in modules)


def test_the_reference_shows_every_name_users_are_told_to_use() -> None:
    documented = _documented()
    missing = [
        f"{where}: {name}"
        for where, name in told_to_use()
        if not _is_documented(_resolve(name), documented)
    ]
    assert missing == []


# Pages whose definitions are copies of code the suite runs, and where that code lives. The
# test app prefixes its type names with "tests."; the pages show the names without it.
COPIED_FROM = {
    "docs/getting-started.md": [
        "tests.testapp.events",
        "tests.testapp.flows",
        "tests.engine.test_engine",
    ],
    "docs/testing.md": ["tests.test_testing_harness_flows"],
    "docs/celery.md": ["bsft_saga.tasks"],
    "docs/timeouts.md": ["tests.testapp.delayed_flows"],
    "docs/deadlines.md": ["tests.testapp.delayed_flows"],
    "docs/flows.md": [
        "tests.testapp.events",
        "tests.testapp.engine_events",
        "tests.testapp.flows",
        "tests.test_publishing",
        "tests.testapp.branch_flows",
    ],
}


def _defined_in(page: str, name: str) -> str | None:
    for module_name in COPIED_FROM[page]:
        module = importlib.import_module(module_name)
        if hasattr(module, name):
            return module_name
    return None


def copied_definitions() -> list[tuple[str, str, str]]:
    """(page:line, defining module, the page's text) of each top-level def or class on a
    page that one of its modules defines; other definitions are illustrations."""
    found = []
    for page in COPIED_FROM:
        text = (ROOT / page).read_text(encoding="utf-8")
        for match in PYTHON_BLOCK.finditer(text):
            block = match.group(1)
            lines = block.splitlines()
            first_line = text[: match.start()].count("\n") + 2
            for node in ast.parse(block).body:
                if not isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                module_name = _defined_in(page, node.name)
                if module_name is None:
                    continue
                start = min([d.lineno for d in node.decorator_list] + [node.lineno])
                source = "\n".join(lines[start - 1 : node.end_lineno])
                found.append((f"{page}:{first_line + start - 1}", module_name, source))
    return found


def _code(source: str) -> str:
    """The code itself: comments and layout do not count."""
    return ast.dump(ast.parse(source))


def _name(source: str) -> str:
    node = ast.parse(source).body[0]
    assert isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
    return node.name


@pytest.mark.parametrize(
    ("where", "module_name", "shown"), copied_definitions(), ids=lambda value: str(value)[:60]
)
def test_definitions_in_the_docs_are_the_code_the_suite_runs(
    where: str, module_name: str, shown: str
) -> None:
    name = _name(shown)
    tested = inspect.getsource(getattr(importlib.import_module(module_name), name))
    assert _code(shown) == _code(tested.replace('"tests.', '"')), (
        f"{where}: {name} is not {module_name}.{name} (with the 'tests.' prefix dropped)"
    )


def test_the_copied_pages_show_the_test_apps_flow_and_events() -> None:
    shown: dict[str, set[str]] = {page: set() for page in COPIED_FROM}
    for where, _module, source in copied_definitions():
        shown[where.split(":")[0]].add(_name(source))
    assert {"OrderPlaced", "OrderState", "OrderFlow"} <= shown["docs/getting-started.md"]
    assert {"OrderFlow", "place_order"} <= shown["docs/flows.md"]
    assert shown["docs/testing.md"] == {"test_events_for_flows_outside_the_list_create_nothing"}
    assert {"_issue", "InvoiceFlow"} <= shown["docs/timeouts.md"]
    assert {"_shipment_budget", "ShipmentFlow"} <= shown["docs/deadlines.md"]
