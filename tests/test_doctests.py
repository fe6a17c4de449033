"""Every module's docstring examples run (those that need Ray are marked ``+SKIP``)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import tdscheme

MODULES = sorted(
    info.name
    for info in pkgutil.walk_packages(tdscheme.__path__, prefix="tdscheme.")
    if not info.name.endswith(".__main__")  # importing it runs the command
)


@pytest.mark.parametrize("name", MODULES)
def test_module_examples(name, ledger_imbalances):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed"
    ledger_imbalances.clear()  # the frame ledger's example shows one on purpose
