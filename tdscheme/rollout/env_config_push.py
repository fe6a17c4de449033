"""The message that carries an env config to a worker: its version, when it applies, how.

:func:`env_config_push` builds an :class:`EnvConfigPush` on the driver, checking its
arguments and turning its config and ``apply_env_config`` into checkpoint data
(:mod:`tdscheme.rollout.env_config_state`) before anything is sent; a worker's
:class:`~tdscheme.rollout.env_config.EnvConfigRunner` receives and applies it, and
:func:`state_version` keeps a restored state from taking a worker's versions back.

Example:
    >>> push = env_config_push({"g": 2.0}, 3, apply="now")
    >>> push.version, push.apply, push.state()["config"]
    (3, 'now', {'g': 2.0})
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from tdscheme.envs.env_config import as_distribution
from tdscheme.rollout.env_config_state import decode_env_config, encode_env_config

__all__ = ["APPLY_MODES", "EnvConfigPush", "env_config_push", "state_version"]

#: When a worker applies a new env config: at each copy's next reset, or before its next step.
APPLY_MODES = ("reset", "now")


@dataclasses.dataclass(frozen=True)
class EnvConfigPush:
    """One env config sent to a worker.

    Attributes:
        config: what the env receives (or a task distribution over levels).
        version: its version, newer than every one the worker received before.
        apply: ``"reset"`` or ``"now"`` (see the module).
        apply_env_config: ``fn(env, config)`` to apply it; ``None``: the env's protocol.
        encoded: ``config`` and ``apply_env_config`` as a checkpoint holds them
            (:mod:`tdscheme.rollout.env_config_state`), made on the driver when pushed;
            ``None``: made when :meth:`state` is asked.
    """

    config: Any
    version: int
    apply: str = "reset"
    apply_env_config: Callable[[Any, Any], None] | None = None
    encoded: tuple[Any, Any] | None = dataclasses.field(default=None, compare=False, repr=False)

    def state(self) -> dict[str, Any]:
        """``{"config", "version", "apply_env_config"}``, which a checkpoint holds.

        Raises:
            TypeError: (a push made without :func:`env_config_push`) a value a checkpoint
                cannot hold.
        """
        config, apply_env_config = self.encoded or (
            encode_env_config(self.config, name="config"),
            encode_env_config(self.apply_env_config, name="apply_env_config"),
        )
        return {"config": config, "version": self.version, "apply_env_config": apply_env_config}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> EnvConfigPush:
        """The push :meth:`state` saved, decoded (``apply="now"``: a restored worker)."""
        config, apply_env_config = state["config"], state.get("apply_env_config")
        return cls(
            decode_env_config(config), int(state["version"]), "now",
            decode_env_config(apply_env_config), encoded=(config, apply_env_config),
        )  # fmt: skip


def env_config_push(
    config: Any,
    version: int,
    *,
    apply: str = "reset",
    apply_env_config: Callable[[Any, Any], None] | None = None,
) -> EnvConfigPush:
    """An :class:`EnvConfigPush`, its arguments checked on the driver before it is sent.

    Raises:
        ValueError: an unknown ``apply``, or a bad task distribution.
        TypeError: ``apply_env_config`` is neither ``None`` nor callable, or ``config`` or
            ``apply_env_config`` is a value a checkpoint cannot hold (a lambda, an object
            of another class than those :mod:`tdscheme.rollout.env_config_state` accepts).

    Example:
        >>> env_config_push({"g": 2.0}, 3).version
        3
        >>> env_config_push({"g": 2.0}, 3, apply="later")
        Traceback (most recent call last):
        ...
        ValueError: apply='later' is invalid; accepted: 'reset', 'now'
    """
    if apply not in APPLY_MODES:
        raise ValueError(f"apply={apply!r} is invalid; accepted: 'reset', 'now'")
    if apply_env_config is not None and not callable(apply_env_config):
        raise TypeError(
            f"apply_env_config={apply_env_config!r} is invalid; accepted: None or a callable "
            "fn(env, config)"
        )
    as_distribution(config)  # a bad {"levels", "probs"} fails here, before any worker
    # before anything is sent, not at a checkpoint mid-run; and here, in the driver, whose
    # __main__ defines the user's classes and functions (a worker could not import them)
    encoded = (
        encode_env_config(config, name="config"),
        encode_env_config(apply_env_config, name="apply_env_config"),
    )
    return EnvConfigPush(config, version, apply, apply_env_config, encoded)


def state_version(state: Mapping[str, Any], received: int, receiver: str) -> int:
    """The env config version a state holds, checked not to go back past ``received``.

    Raises:
        ValueError: the state's version is older than ``received`` (``receiver`` named).
    """
    version = int(state["version"])
    if version < received:
        raise ValueError(
            f"env config version {version} of the state is older than version {received}, "
            f"which {receiver} already received; versions only go forward"
        )
    return version
