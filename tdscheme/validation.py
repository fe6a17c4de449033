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
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = [
    "check_bool",
    "check_choice",
    "check_frame_budget",
    "check_int",
    "check_positive_number",
    "invalid",
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
