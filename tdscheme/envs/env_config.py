"""How an env receives an env config: the protocol, found through wrappers and vector envs.

An *env config* is a small picklable value (a dict, a dataclass, a tensor of task ids)
that changes how an env behaves: a curriculum level, a randomization range, a task. A
torchrl env takes it in the first of these ways that it offers (:func:`env_config_target`):

1. ``apply_env_config(env, config)``, a callable given with the config
   (``RayCollector.set_env_config(..., apply_env_config=fn)``), called with the torchrl
   env: every copy at once;
2. the torchrl env's own ``set_env_config(config)`` (a torchrl ``EnvBase`` subclass;
   through ``TransformedEnv.base_env``): every copy at once;
3. a gymnasium env's ``set_env_config(config)``, under torchrl's ``GymEnv`` /
   ``GymWrapper`` (``_env``), found through its wrappers (``env.get_wrapper_attr``):

   * one gymnasium env: that env;
   * a ``SyncVectorEnv``: each copy (``env.envs[i]``) on its own, whatever the
     autoreset mode, so that each copy can take a new config at its own next reset;
   * another vector env (``AsyncVectorEnv``): ``env.call("set_env_config", config)``,
     every copy at once.

An env that offers none is a ``ValueError`` naming its class and these ways. An env may
also offer ``check_env_config(config)`` (the same places, changing nothing): a worker
calls it when a config arrives and refuses one that raises (:class:`EnvConfigTarget`).
:class:`EnvAttributes` is a gymnasium wrapper whose ``set_env_config`` sets the env's
attributes (``{"g": 12.0}`` on Pendulum), through gymnasium's ``set_wrapper_attr``.

Copies that can be addressed one by one (one env, a ``SyncVectorEnv``'s copies) take a
config at their own reset; the others (EnvPool, ``AsyncVectorEnv``, a torchrl env's own
method, a callable) take it all at once, at the next reset of any copy: a copy in the
middle of an episode then finishes it under the new config.

A config may also be a task distribution, :class:`TaskDistribution` (or the dict
``{"levels": [...], "probs": [...]}``): each copy draws a level at each of its resets.

Example:
    >>> env = make_configurable_env("Pendulum-v1", num_envs=2)  # a SyncVectorEnv inside
    >>> target = env_config_target(env)
    >>> target.num_copies, target.per_copy
    (2, True)
    >>> target.apply({"g": 4.0}, copies=[1])
    >>> [copy.unwrapped.g for copy in env._env.envs]
    [10.0, 4.0]
    >>> env.close()
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from torchrl.envs import EnvBase, GymWrapper, TransformedEnv

__all__ = [
    "EnvAttributes",
    "EnvConfigTarget",
    "TaskDistribution",
    "as_distribution",
    "env_config_target",
    "make_configurable_env",
]

#: The method an env (gymnasium or torchrl) offers to receive an env config.
METHOD = "set_env_config"
#: The method an env may offer to check a config without applying it (called at staging).
CHECK = "check_env_config"

#: ``hook(copies)``: copies about to reset (``None``: every copy, or copies not addressable).
ResetHook = Callable[[Sequence[int] | None], None]


@dataclasses.dataclass(frozen=True)
class TaskDistribution:
    """Levels (configs) each env copy draws from at each of its resets, with their probabilities.

    The dict ``{"levels": [...], "probs": [...]}`` (``probs`` optional: uniform) is the same
    thing (:func:`as_distribution`). The draws use the worker's seed, so runs reproduce;
    each frame records the index of the level it ran (``("collector", "env_task")``).

    Args:
        levels: the configs (each is what the env's ``set_env_config`` receives).
        probs: one weight per level, ``>= 0`` and not all 0 (normalized); ``None``: uniform.

    Raises:
        ValueError: no levels, or bad weights (named).

    Example:
        >>> tasks = TaskDistribution([{"g": 2.0}, {"g": 10.0}], probs=[3, 1])
        >>> tasks.probs
        (0.75, 0.25)
        >>> tasks.sample(np.random.default_rng(0)), tasks.sample(np.random.default_rng(0))
        (0, 0)
    """

    levels: Sequence[Any]
    probs: Sequence[float] | None = None

    def __post_init__(self) -> None:
        levels = tuple(self.levels) if isinstance(self.levels, (list, tuple)) else None
        if not levels:
            raise ValueError(
                f"levels={self.levels!r} is invalid; accepted: a non-empty list of env configs"
            )
        probs = [1.0] * len(levels) if self.probs is None else list(self.probs)
        bad = len(probs) != len(levels) or any(
            isinstance(p, bool) or not isinstance(p, (int, float)) or not math.isfinite(p) or p < 0
            for p in probs
        )
        if bad or sum(probs) <= 0:
            raise ValueError(
                f"probs={self.probs!r} is invalid; accepted: {len(levels)} finite numbers >= 0 "
                "(one per level), not all 0, or None (uniform)"
            )
        total = float(sum(probs))
        object.__setattr__(self, "levels", levels)
        object.__setattr__(self, "probs", tuple(float(p) / total for p in probs))

    def sample(self, rng: np.random.Generator) -> int:
        """The index of a level drawn with ``rng``."""
        return int(rng.choice(len(self.levels), p=self.probs))


def as_distribution(config: Any) -> TaskDistribution | None:
    """``config`` as a :class:`TaskDistribution` when it is one (or its dict form), else ``None``.

    Raises:
        ValueError: a ``{"levels", "probs"}`` dict with bad values.

    Example:
        >>> as_distribution({"levels": [1, 2]}).probs
        (0.5, 0.5)
        >>> as_distribution({"g": 2.0}) is None
        True
    """
    if isinstance(config, TaskDistribution):
        return config
    if isinstance(config, Mapping) and "levels" in config and set(config) <= {"levels", "probs"}:
        return TaskDistribution(config["levels"], config.get("probs"))
    return None


class EnvAttributes(gym.Wrapper):
    """A gymnasium wrapper whose ``set_env_config(config)`` sets the env's attributes.

    ``config`` maps attribute names to values, set where gymnasium's ``set_wrapper_attr``
    finds them (on a wrapper, else on the env below), e.g. Pendulum's gravity ``g``.

    Args:
        env: the gymnasium env.

    Raises:
        AttributeError: (from ``set_env_config``) a name no layer of the env has.

    Example:
        >>> env = EnvAttributes(gym.make("Pendulum-v1"))
        >>> env.set_env_config({"g": 2.5})
        >>> env.unwrapped.g
        2.5
        >>> env.set_env_config({"gravity": 2.5})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        AttributeError: env config {'gravity': 2.5}: PendulumEnv has no attribute 'gravity' ...
    """

    def set_env_config(self, config: Mapping[str, Any]) -> None:
        """Sets each ``name: value`` of ``config`` on the env (checked first: all or none)."""
        self.check_env_config(config)
        for name, value in config.items():
            self.env.set_wrapper_attr(name, value, force=False)

    def check_env_config(self, config: Any) -> None:
        """Raises what :meth:`set_env_config` would, changing nothing (a worker's staging)."""
        if not isinstance(config, Mapping):
            raise TypeError(
                f"env config {config!r} is invalid for EnvAttributes; accepted: a mapping of "
                "attribute names to values"
            )
        for name in config:
            if not self.env.has_wrapper_attr(name):
                raise AttributeError(
                    f"env config {dict(config)!r}: {type(self.unwrapped).__name__} has no "
                    f"attribute {name!r} (EnvAttributes sets existing attributes only)"
                )


def make_configurable_env(env_id: str, *, num_envs: int = 1, **make_kwargs: Any) -> EnvBase:
    """:func:`~tdscheme.envs.make_env`'s env with each gymnasium copy in :class:`EnvAttributes`.

    One env is a torchrl ``GymWrapper``; several are a ``SyncVectorEnv`` with
    ``AutoresetMode.DISABLED`` (as ``make_env`` builds them), so each copy takes a new
    config at its own reset.

    Args:
        env_id: a registered gymnasium id.
        num_envs: copies, an int ``>= 1``.
        make_kwargs: ``gym.make``'s keyword arguments (e.g. ``max_episode_steps``).

    Example:
        >>> env = make_configurable_env("Pendulum-v1", num_envs=2)
        >>> env_config_target(env).apply({"g": 4.0})
        >>> [copy.unwrapped.g for copy in env._env.envs]
        [4.0, 4.0]
        >>> env.close()
    """
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs={num_envs!r} is invalid; accepted: an int >= 1")
    make = functools.partial(_attributes_env, env_id, make_kwargs)
    if num_envs == 1:
        return GymWrapper(make())
    disabled = gym.vector.AutoresetMode.DISABLED
    return GymWrapper(gym.vector.SyncVectorEnv([make] * num_envs, autoreset_mode=disabled))


def _attributes_env(env_id: str, make_kwargs: dict[str, Any]) -> EnvAttributes:
    return EnvAttributes(gym.make(env_id, **make_kwargs))


class EnvConfigTarget:
    """Where an env's configs go: its copies, one by one where they can be addressed.

    Built by :func:`env_config_target`. :meth:`apply` sets a config; :meth:`check` raises
    what it would, where the env says (its ``check_env_config``); :meth:`on_reset`
    installs the hook a rollout uses to apply configs as copies reset.

    Attributes:
        num_copies: the env's copies (1 for an env without a batch).
        per_copy: whether each copy takes its own config (else all take the same).
        description: how the config is applied, for messages.
    """

    def __init__(
        self,
        *,
        num_copies: int,
        apply_one: Callable[[int, Any], None] | None,
        apply_all: Callable[[Any], None],
        reset_objects: Sequence[Any],
        step_object: Any = None,
        description: str,
        check: Callable[[Any], None] | None = None,
    ) -> None:
        self.num_copies = num_copies
        self.per_copy = apply_one is not None
        self.description = description
        self._apply_one, self._apply_all = apply_one, apply_all
        self._reset_objects = list(reset_objects)
        self._step_object = step_object
        self._check = check
        self._hooked = False

    def check(self, config: Any) -> None:
        """Raises the error :meth:`apply` would, where the env can tell without applying."""
        if self._check is not None:
            self._check(config)

    def apply(self, config: Any, copies: Sequence[int] | None = None) -> None:
        """Gives ``config`` to ``copies`` (``None``: every copy; only with :attr:`per_copy`)."""
        if copies is None or not self.per_copy:
            if self.per_copy:
                for i in range(self.num_copies):
                    self._apply_one(i, config)
            else:
                self._apply_all(config)
            return
        for i in copies:
            self._apply_one(i, config)

    def on_reset(self, hook: ResetHook) -> None:
        """Calls ``hook(copies)`` just before copies reset, whoever resets them (once).

        Per-copy targets wrap each copy's ``reset`` (``hook([i])``): torchrl's
        ``reset_mask``, gymnasium's autoreset inside ``step`` and the lean rollout all go
        through it. The others wrap the env's ``reset`` (``hook(None)``) and, where the env
        resets copies inside its ``step`` (EnvPool, autoreset vector envs), call
        ``hook(None)`` after a step in which an episode ended.
        """
        if self._hooked:
            return
        self._hooked = True
        for i, obj in enumerate(self._reset_objects):
            _wrap_reset(obj, hook, [i] if self.per_copy else None)
        if self._step_object is not None:
            _wrap_step(self._step_object, hook)


def _wrap_reset(obj: Any, hook: ResetHook, copies: list[int] | None) -> None:
    reset = obj.reset

    def hooked_reset(*args: Any, **kwargs: Any) -> Any:
        hook(copies)
        return reset(*args, **kwargs)

    object.__setattr__(obj, "reset", hooked_reset)  # the instance's; the class is untouched


def _wrap_step(obj: Any, hook: ResetHook) -> None:
    step = obj.step

    def hooked_step(*args: Any, **kwargs: Any) -> Any:
        out = step(*args, **kwargs)
        if np.any(out[2]) or np.any(out[3]):  # an episode ended: the env resets it itself
            hook(None)
        return out

    object.__setattr__(obj, "step", hooked_step)


def _gym_method(env: Any, name: str = METHOD) -> Callable[[Any], None] | None:
    """A gymnasium env's ``set_env_config`` (or ``name``), found through its wrappers."""
    try:
        method = env.get_wrapper_attr(name)
    except AttributeError:
        return None
    return method if callable(method) else None


def _num_copies(env: Any) -> int:
    return max(1, int(np.prod(tuple(env.batch_size)))) if hasattr(env, "batch_size") else 1


def env_config_target(
    env: Any, apply_env_config: Callable[[Any, Any], None] | None = None
) -> EnvConfigTarget:
    """How ``env`` (a torchrl env) receives env configs: see the module for the order.

    Args:
        env: the torchrl env (bare or in a ``TransformedEnv``).
        apply_env_config: ``apply_env_config(env, config)``; first when given.

    Raises:
        ValueError: the env offers no way, named with its class and the ways it could.
    """
    base = env.base_env if isinstance(env, TransformedEnv) else env
    inner = getattr(base, "_env", None)  # torchrl's GymWrapper / MultiThreadedEnv: the env below
    n = _num_copies(base)
    resets = [env if inner is None else inner]  # the torchrl env the rollout resets, or below
    steps = None
    if isinstance(inner, gym.vector.SyncVectorEnv):
        resets = list(inner.envs)  # each copy's reset, wherever it is called
    elif isinstance(inner, gym.vector.VectorEnv):  # EnvPool, AsyncVectorEnv: resets in step
        disabled = getattr(inner, "autoreset_mode", None) == gym.vector.AutoresetMode.DISABLED
        steps = None if disabled else inner
    if apply_env_config is not None:
        return EnvConfigTarget(
            num_copies=n, apply_one=None, apply_all=lambda config: apply_env_config(env, config),
            reset_objects=resets, step_object=steps,
            description=f"apply_env_config={getattr(apply_env_config, '__name__', '?')}",
        )  # fmt: skip
    # the class's: torchrl's wrappers hand unknown attributes on to the env below them
    own = getattr(base, METHOD) if callable(getattr(type(base), METHOD, None)) else None
    if own is not None:
        return EnvConfigTarget(
            num_copies=n, apply_one=None, apply_all=own, reset_objects=[env],
            description=f"{type(base).__name__}.{METHOD}", check=getattr(base, CHECK, None),
        )  # fmt: skip
    if isinstance(inner, gym.vector.SyncVectorEnv):
        methods = [_gym_method(copy) for copy in inner.envs]
        checks = [c for c in (_gym_method(copy, CHECK) for copy in inner.envs) if c]
        if all(methods):
            return EnvConfigTarget(
                num_copies=len(methods), apply_one=lambda i, config: methods[i](config),
                apply_all=lambda config: [m(config) for m in methods], reset_objects=resets,
                description=f"{METHOD} of each SyncVectorEnv copy",
                check=lambda config: [c(config) for c in checks],
            )  # fmt: skip
    elif isinstance(inner, gym.vector.VectorEnv):
        return EnvConfigTarget(
            num_copies=n, apply_one=None,
            apply_all=lambda config: inner.call(METHOD, config),
            reset_objects=[inner], step_object=inner,
            description=f"{type(inner).__name__}.call({METHOD!r})",
        )  # fmt: skip
    elif isinstance(inner, gym.Env):
        method = _gym_method(inner)
        if method is not None:
            return EnvConfigTarget(
                num_copies=1, apply_one=lambda i, config: method(config), apply_all=method,
                reset_objects=[inner], description=f"{type(inner.unwrapped).__name__}.{METHOD}",
                check=_gym_method(inner, CHECK),
            )  # fmt: skip
    raise ValueError(_no_protocol(env, inner))


def _no_protocol(env: Any, inner: Any) -> str:
    name = type(env).__name__
    if inner is not None:
        below = inner.envs[0] if isinstance(inner, gym.vector.SyncVectorEnv) else inner
        below = getattr(below, "unwrapped", below)
        name = f"{name} over {type(inner).__name__} ({type(below).__name__})"
    return (
        f"the env {name} offers no way to receive an env config; accepted: a "
        f"{METHOD}(config) method on the gymnasium env (found through its wrappers, on every "
        f"copy of a vector env; tdscheme.envs.EnvAttributes wraps one that sets attributes), "
        f"a {METHOD}(config) method on the torchrl env, or apply_env_config=fn(env, config) "
        "given with the config"
    )
