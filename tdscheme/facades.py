"""How public surfaces are assembled: lazy package exports, and delegators that keep their docs.

* :func:`lazy_exports` (PEP 562): a package ``__init__`` maps each public name to the
  submodule that defines it; importing the package then imports none of them. This
  keeps the command's argument parsing and the configs free of torch (they import in
  well under a second), and a Ray worker that unpickles a collector imports only what
  it uses.
* :func:`documented_by`: a class that is a thin surface over composed parts (the
  :class:`~tdscheme.RayCollector`) delegates each method in one line; the delegator
  shows the docstring of the method it calls.

Example:
    >>> __getattr__, __dir__ = lazy_exports("tdscheme", {"Scheme": "tdscheme.scheme"})
    >>> "Scheme" in __dir__()
    True
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = ["documented_by", "lazy_exports"]

F = TypeVar("F", bound=Callable[..., Any])


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


def documented_by(source: Callable[..., Any]) -> Callable[[F], F]:
    """Gives a one-line delegator the docstring of the method it calls.

    Example:
        >>> def push(weights):
        ...     "Pushes weights."
        >>> @documented_by(push)
        ... def update_policy_weights_(weights):
        ...     return push(weights)
        >>> update_policy_weights_.__doc__
        'Pushes weights.'
    """

    def document(delegator: F) -> F:
        delegator.__doc__ = source.__doc__
        return delegator

    return document
