"""``tests/`` mirrors ``bsft_saga/``: each folder of tests is named after the package whose
tests it holds, apart from the few that cut across the package (CONTRIBUTING.md, "Writing
tests"), so that a maintainer finds the tests of ``bsft_saga/timeouts/`` in
``tests/timeouts/`` and nowhere else."""

from __future__ import annotations

from tests.conftest import ROOT

#: Folders that test the whole (real processes, the model, the project) or help the tests.
CROSS_CUTTING = {"processes", "model", "project", "support", "workers", "testapp", "eventsapp"}


def _folders(path: str) -> set[str]:
    return {
        child.name
        for child in (ROOT / path).iterdir()
        if child.is_dir() and (child / "__init__.py").exists()
    }


def test_every_folder_of_tests_is_a_package_of_bsft_saga_or_cuts_across_it() -> None:
    packages = _folders("bsft_saga")

    mirroring_nothing = _folders("tests") - packages - CROSS_CUTTING

    assert not mirroring_nothing, (
        f"tests/{sorted(mirroring_nothing)[0]}/ mirrors no package of bsft_saga/: move its "
        "tests to the folder of the package they test (tests/<package>/, or "
        "tests/test_<module>.py for a module of bsft_saga/ itself)"
    )


def test_every_test_module_at_the_top_is_named_after_a_module_of_bsft_saga() -> None:
    modules = {path.stem for path in (ROOT / "bsft_saga").glob("*.py")}

    strays = sorted(
        path.name
        for path in (ROOT / "tests").glob("test_*.py")
        if not any(
            path.stem == f"test_{module}" or path.stem.startswith(f"test_{module}_")
            for module in modules
        )
    )

    assert not strays, f"{strays[0]} is named after no module of bsft_saga/"
