"""gymnasium envs as torchrl envs, gymnasium's default vector env (NEXT_STEP autoreset) included.

torchrl's ``GymWrapper`` takes a vector env whose autoreset mode is ``DISABLED``
(the collector resets the copies that ended, with ``reset_mask``) or
``SAME_STEP``, and refuses gymnasium's default, ``NEXT_STEP``: there the step
after an episode's end is a reset step, whose action the env ignores and whose
"transition" (the final observation to the first one, reward 0) is not one.
``gym.make_vec(env_id, num_envs)`` builds exactly that for every registered env
but CartPole (a ``SyncVectorEnv``).

:func:`wrap_gym_env` makes such an env a torchrl env without reset steps: a
``SyncVectorEnv`` in ``NEXT_STEP`` mode is switched to ``DISABLED`` before any
step (each copy is the same gymnasium env; the collector resets a copy right after
its episode ends, with the same ``reset`` call on the same copy, so the
transitions are those of the same ``SyncVectorEnv`` built ``DISABLED``, seed for
seed, and the collector's ``frames_per_batch`` counts transitions only). A
vector env that steps its copies in one call (CartPole's ``CartPoleVectorEnv``,
an ``AsyncVectorEnv``) cannot have one copy reset alone in ``NEXT_STEP`` mode, and
is refused with the way to build it that runs. Envs in the other modes, and
single envs, are wrapped as they are.

A collector's ``create_env_fn`` may return the gymnasium env itself: tdscheme's
workers wrap it with :func:`wrap_gym_env`.

Example:
    >>> import gymnasium as gym
    >>> env = wrap_gym_env(gym.make_vec("Acrobot-v1", num_envs=3))
    >>> env.batch_size, env._env.autoreset_mode.name
    (torch.Size([3]), 'DISABLED')
    >>> env.rollout(4)["next", "reward"].shape
    torch.Size([3, 4, 1])
    >>> env.close()
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["build_torchrl_env", "is_gym_env", "torchrl_env_factory", "wrap_gym_env"]


def is_gym_env(env: Any) -> bool:
    """Whether ``env`` is a gymnasium ``Env`` or ``VectorEnv`` (not yet a torchrl env)."""
    import gymnasium as gym

    return isinstance(env, (gym.Env, gym.vector.VectorEnv))


def torchrl_env_factory(create_env_fn: Any) -> Any:
    """``create_env_fn`` whose gymnasium env comes back wrapped (:func:`wrap_gym_env`); picklable."""
    return functools.partial(build_torchrl_env, create_env_fn)


def build_torchrl_env(create_env_fn: Any) -> Any:
    """``create_env_fn()``, a gymnasium env wrapped (:func:`wrap_gym_env`), any other as it is."""
    env = create_env_fn()
    return wrap_gym_env(env) if is_gym_env(env) else env


def wrap_gym_env(env: Any, **wrapper_kwargs: Any) -> Any:
    """``env`` as torchrl's ``GymWrapper``, a ``NEXT_STEP`` ``SyncVectorEnv`` made ``DISABLED``.

    Args:
        env: a gymnasium ``Env`` or ``VectorEnv`` (see the module).
        **wrapper_kwargs: ``GymWrapper``'s own arguments (``categorical_action_encoding``, ...).

    Returns:
        The torchrl env.

    Raises:
        TypeError: ``env`` is not a gymnasium env.
        ValueError: a ``NEXT_STEP`` vector env whose copies cannot be reset one at a
            time (the message says how to build one that runs).
    """
    import gymnasium as gym
    from torchrl.envs import GymWrapper

    if not is_gym_env(env):
        raise TypeError(
            f"env={env!r} is not a gymnasium env; accepted: a gymnasium Env or VectorEnv"
        )
    if isinstance(env, gym.vector.VectorEnv):
        _disable_next_step_autoreset(env)
    return GymWrapper(env, **wrapper_kwargs)


def _disable_next_step_autoreset(env: Any) -> None:
    """Switches a ``NEXT_STEP`` ``SyncVectorEnv`` to ``DISABLED``; refuses other ``NEXT_STEP`` envs."""
    import gymnasium as gym

    base = env.unwrapped
    mode = getattr(base, "autoreset_mode", None) or env.metadata.get("autoreset_mode")
    if mode != gym.vector.AutoresetMode.NEXT_STEP:
        return
    if type(base) is not gym.vector.SyncVectorEnv:
        spec = getattr(env, "spec", None)
        env_id = spec.id if spec is not None else "ENV_ID"
        raise ValueError(
            f"env={type(base).__name__} resets in the step after an episode ends (autoreset "
            "mode NEXT_STEP) and steps its copies in one call, so no copy can be reset alone; "
            f"accepted: a SyncVectorEnv (gym.make_vec({env_id!r}, num_envs, "
            "vectorization_mode='sync')), or a vector env built with vector_kwargs="
            "{'autoreset_mode': gym.vector.AutoresetMode.DISABLED} (or SAME_STEP), or "
            "tdscheme.envs.make_env"
        )
    if base._autoreset_envs.any():  # a copy waits for its reset step: reset them all first
        base.reset()
    base.autoreset_mode = gym.vector.AutoresetMode.DISABLED
    base.metadata["autoreset_mode"] = gym.vector.AutoresetMode.DISABLED  # the env's own copy
