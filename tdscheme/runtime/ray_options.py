"""Ray actor options (``collector_resources``, ``remote_configs``, ...) checked before any actor starts.

Ray checks them itself only when the actor is created (after Ray has started and
the other actors are placed); :func:`check_actor_options` runs Ray's own validator
at configuration time and words its error the tdscheme way.

Example:
    >>> check_actor_options("collector_resources", {"num_cpus": 0.5})
    >>> check_actor_options("collector_resources", {"num_cpu": 1})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: collector_resources={'num_cpu': 1} is invalid; accepted: Ray actor options (Ray says: Invalid option keyword num_cpu for actors. ...)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tdscheme.validation import invalid

__all__ = ["check_actor_options"]


def _ray_validator() -> Any:
    try:  # Ray >= 2.5x keeps it in ray._common, older releases in ray._private
        from ray._common.ray_option_utils import validate_actor_options
    except ImportError:  # pragma: no cover - depends on the Ray release
        try:
            from ray._private.ray_option_utils import validate_actor_options
        except ImportError:
            return None
    return validate_actor_options


def check_actor_options(name: str, options: Any) -> None:
    """Raises unless ``options`` is a dict of valid Ray actor options (keys, types, ranges).

    Args:
        name: the argument's name in the message.
        options: e.g. ``{"num_cpus": 1, "resources": {"custom": 1}}``.

    Raises:
        ValueError: naming the argument, its value and Ray's reason.
    """
    if not isinstance(options, Mapping):
        raise invalid(name, options, "a dict of Ray actor options, e.g. {'num_cpus': 1}")
    validate = _ray_validator()
    if validate is None:
        return
    try:
        validate(dict(options), in_options=False)
    except (ValueError, TypeError) as err:
        raise invalid(name, dict(options), f"Ray actor options (Ray says: {err})") from None
