"""The message that carries an env config to a worker: its version, when it applies, how.

:func:`env_config_push` builds an :class:`EnvConfigPush` on the driver, checking its
arguments and turning its config and ``apply_env_config`` into checkpoint data
(:mod:`tdscheme.rollout.env_config_state`) before anything is sent; a worker's
:class:`~tdscheme.rollout.env_config.EnvConfigRunner` receives and applies it, and
:func:`state_version` keeps a restored state from taking a worker's versions back.

:func:`set_env_config_method` is the public ``set_env_config`` of the driver-side classes
whose workers take env configs (the RayCollector, the gradient-worker coordinators): its
signature and argument checks in one place, in front of each class's
:class:`EnvConfigSender`.

Example:
    >>> push = env_config_push({"g": 2.0}, 3, apply="now")
    >>> push.version, push.apply, push.state()["config"]
    (3, 'now', {'g': 2.0})
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence, Sized
from typing import Any, Protocol

from tdscheme.envs.env_config import as_distribution
from tdscheme.rollout.env_config_state import decode_env_config, encode_env_config

__all__ = [
    "APPLY_MODES",
    "EnvConfigPush",
    "EnvConfigSender",
    "checked_worker_ids",
    "env_config_push",
    "set_env_config_method",
    "state_version",
]

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


class EnvConfigSender(Protocol):
    """The part of a driver-side class that owns its workers' env-config versions and sends.

    A collector pool's ``EnvConfigs`` (:mod:`tdscheme.collectors.driver.env_config`), a
    gradient-worker pool's ``GradientEnvConfigs`` (:mod:`tdscheme.gradient_workers.env_config`).

    Attributes:
        pool: its workers, ids ``0 .. len(pool) - 1``.
        version: the newest version pushed (0: none).
    """

    pool: Sized
    version: int

    def push(self, push: EnvConfigPush, worker_ids: list[int]) -> None:
        """Sends ``push``, version :attr:`version` + 1 and checked, to ``worker_ids``."""


def checked_worker_ids(worker_ids: int | Sequence[int] | None, num_workers: int) -> list[int]:
    """The workers a push goes to: ``worker_ids`` (one id, several, ``None``: all), checked.

    Raises:
        ValueError: no id, or an id that is not in ``0 .. num_workers - 1`` (named).

    Example:
        >>> checked_worker_ids(None, 3), checked_worker_ids(1, 3)
        ([0, 1, 2], [1])
        >>> checked_worker_ids([0, 3], 3)
        Traceback (most recent call last):
        ...
        ValueError: worker_ids=[0, 3] is invalid (unknown ids [3]); accepted: ...
    """
    if worker_ids is None:
        return list(range(num_workers))
    ids = [worker_ids] if isinstance(worker_ids, int) else list(worker_ids)
    bad = [i for i in ids if isinstance(i, bool) or not isinstance(i, int)]
    bad += [i for i in ids if i not in bad and not 0 <= i < num_workers]
    if bad or not ids:
        raise ValueError(
            f"worker_ids={worker_ids!r} is invalid (unknown ids {bad}); accepted: None "
            f"(all) or ids in 0..{num_workers - 1}"
        )
    return ids


def set_env_config_method(doc: str) -> Callable[..., int]:
    """The ``set_env_config`` method of a driver-side class whose workers take env configs.

    One signature and one argument check for every class that offers it (the
    :class:`~tdscheme.RayCollector`, the gradient-worker coordinators): the class assigns
    it in its body, ``set_env_config = set_env_config_method(doc)``, and gives
    ``_env_config_sender()``, which returns its :class:`EnvConfigSender` (the part that
    owns the versions and sends). The method checks ``worker_ids`` and builds the
    :class:`EnvConfigPush` (:func:`env_config_push`) before the sender sees anything.

    Args:
        doc: its docstring in that class: how the class's workers acknowledge a push,
            and what it raises, differ (a collector's acknowledge while they collect, a
            gradient worker's before the push returns). A new function per call, so the
            docs list the method on each class with the class's own docstring.

    Returns:
        ``set_env_config(self, config, *, worker_ids=None, apply="reset",
        apply_env_config=None) -> int``, the version pushed.

    Example:
        >>> class Sender:  # prints what it would send
        ...     pool, version = ["worker 0", "worker 1"], 0
        ...     def push(self, push, worker_ids):
        ...         self.version = push.version
        ...         print(push.config, push.apply, worker_ids)
        >>> class Driver:
        ...     set_env_config = set_env_config_method("Sends an env config to the workers.")
        ...     def __init__(self):
        ...         self.sender = Sender()
        ...     def _env_config_sender(self):
        ...         return self.sender
        >>> Driver().set_env_config({"g": 2.0}, worker_ids=1, apply="now")
        {'g': 2.0} now [1]
        1
        >>> Driver.set_env_config.__doc__
        'Sends an env config to the workers.'
    """

    def set_env_config(
        self,
        config: Any,
        *,
        worker_ids: int | Sequence[int] | None = None,
        apply: str = "reset",
        apply_env_config: Callable[[Any, Any], None] | None = None,
    ) -> int:
        sender: EnvConfigSender = self._env_config_sender()
        ids = checked_worker_ids(worker_ids, len(sender.pool))
        push = env_config_push(
            config, sender.version + 1, apply=apply, apply_env_config=apply_env_config
        )
        sender.push(push, ids)
        return push.version

    set_env_config.__doc__ = doc
    return set_env_config
