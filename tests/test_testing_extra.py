"""``bsft_saga.testing`` without its extra: a ModuleNotFoundError that says what to install."""

from __future__ import annotations

import importlib
import sys

import pytest


def test_importing_the_harness_without_freezegun_names_the_testing_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "freezegun", None)  # as if it were not installed
    monkeypatch.delitem(sys.modules, "bsft_saga.testing")

    with pytest.raises(ModuleNotFoundError, match=r"pip install 'bsft-saga\[testing\]'") as error:
        importlib.import_module("bsft_saga.testing")

    assert error.value.name == "freezegun"
