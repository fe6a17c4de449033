"""Argument checks every config shares, with one wording: ``name=value is invalid; accepted: ...``.

Example:
    >>> check_int("num_collectors", 0, minimum=1)
    Traceback (most recent call last):
    ...
    ValueError: num_collectors=0 is invalid; accepted: an int >= 1
    >>> check_int("seed", None, minimum=0, optional=True)
    >>> check_choice("mode", "fast", ("sync", "async"))
    Traceback (most recent call last):
    ...
    ValueError: mode='fast' is invalid; accepted: 'sync', 'async'

An optional package is checked the same way, without importing it, and named with the
extra of ``pyproject.toml`` that installs it:

    >>> missing_extra("video=True", ["no_such_package_here"], "video")
    ImportError("video=True needs no_such_package_here, which is not installed; install it with `pip install -c constraints.txt -e '.[video]'` in tdscheme's clone")
    >>> missing_extra("video=True", ["math"], "video") is None
    True
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Sequence
from typing import Any

__all__ = [
    "check_bool",
    "check_choice",
    "check_frame_budget",
    "check_int",
    "check_positive_number",
    "install_command",
    "invalid",
    "missing_extra",
]


def invalid(name: str, value: Any, accepted: str, *, context: str = "") -> ValueError:
    """The error for a bad argument: its name, its value, what is accepted (and with what)."""
    with_ = f" with {context}" if context else ""
    return ValueError(f"{name}={value!r} is invalid{with_}; accepted: {accepted}")


def check_int(name: str, value: Any, *, minimum: int, optional: bool = False) -> None:
    """Raises unless ``value`` is an int ``>= minimum`` (or ``None`` when ``optional``)."""
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise invalid(name, value, f"{'None or ' if optional else ''}an int >= {minimum}")


def check_frame_budget(name: str, value: Any) -> None:
    """Raises unless ``value`` is an int ``>= 0``, or ``-1`` (no limit)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < -1:
        raise invalid(name, value, "an int >= 0, or -1 for no limit")


def check_positive_number(name: str, value: Any) -> None:
    """Raises unless ``value`` is a finite int or float ``> 0``."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not (math.isfinite(value) and value > 0):
        raise invalid(name, value, "a finite number > 0")


def check_bool(name: str, value: Any) -> None:
    """Raises unless ``value`` is ``True`` or ``False``."""
    if not isinstance(value, bool):
        raise invalid(name, value, "True or False")


def check_choice(name: str, value: Any, choices: Sequence[Any]) -> None:
    """Raises unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise invalid(name, value, ", ".join(map(repr, choices)))


def install_command(extra: str) -> str:
    """How to install an extra of ``pyproject.toml``: tdscheme is installed from its clone
    (README), not from a package index, so ``pip install 'tdscheme[extra]'`` finds nothing.

    Example:
        >>> install_command("envpool")
        "`pip install -c constraints.txt -e '.[envpool]'` in tdscheme's clone"
    """
    return f"`pip install -c constraints.txt -e '.[{extra}]'` in tdscheme's clone"


def missing_extra(
    what: str, packages: Sequence[str], extra: str, *, instead: str = ""
) -> ImportError | None:
    """The error for a feature whose optional packages are missing, or ``None``; imports nothing.

    Args:
        what: the feature, as the subject of "needs" (e.g. ``"env_backend='envpool'"``).
        packages: the Python packages (import names) it needs.
        extra: the extra of ``pyproject.toml`` that installs them (:func:`install_command`).
        instead: what to do instead, appended as ``", or <instead>"``.

    Returns:
        An ``ImportError`` naming the missing packages and the install command, or ``None``.
    """
    missing = [name for name in packages if not _installed(name)]
    if not missing:
        return None
    one = len(missing) == 1
    text = (
        f"{what} needs {' and '.join(missing)}, which {'is' if one else 'are'} not installed; "
        f"install {'it' if one else 'them'} with {install_command(extra)}"
    )
    return ImportError(text + (f", or {instead}" if instead else ""))


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module without a spec
        return False
