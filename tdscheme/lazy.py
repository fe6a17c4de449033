"""Lazy package exports (PEP 562): a package's public names, imported on first use.

A package ``__init__`` maps each public name to the submodule that defines it;
importing the package then imports none of them. This keeps the command's
argument parsing and the configs free of torch (they import in well under a
second), and a Ray worker that unpickles a collector imports only what it uses.

Example:
    >>> __getattr__, __dir__ = lazy_exports("tdscheme", {"Scheme": "tdscheme.scheme"})
    >>> "Scheme" in __dir__()
    True
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, whose ``exports`` live in submodules.

    Args:
        package: the package's ``__name__``.
        exports: public name -> the module that defines it.

    Returns:
        ``(__getattr__, __dir__)``, to assign at the package's module level. The
        first access to a name imports its module and caches the value on the package.
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *exports})

    return __getattr__, __dir__
