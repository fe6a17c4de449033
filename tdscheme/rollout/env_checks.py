"""Which torchrl envs the lean rollout steps itself, and why not the others.

:class:`~tdscheme.rollout.lean.LeanCollector` steps the gymnasium (or EnvPool) env
under torchrl's wrapper directly. It can for a plain ``GymWrapper`` / ``GymEnv``
over a gymnasium env or vector env (autoreset ``DISABLED`` or ``SAME_STEP``, no
frame skip, no info-dict reader but torchrl's own final-observation reader of a
SAME_STEP env, a Box or a Dict of Boxes observed, pixels included when the env
itself observes them) and for torchrl's ``MultiThreadedEnv`` over EnvPool.
:func:`why_not_lean_env` says which, or why not.

Example:
    >>> from tdscheme.envs import make_env
    >>> why_not_lean_env(make_env("CartPole-v1", num_envs=2)) is None
    True
"""

from __future__ import annotations

from typing import Any

from torchrl.envs import GymWrapper

from tdscheme.rollout.env_steps import is_envpool_env

__all__ = ["final_observation_roots", "is_same_step", "why_not_lean_env"]


def why_not_lean_env(env: Any) -> str | None:
    """Why the lean loop cannot step ``env`` (a torchrl env, untransformed), or ``None``."""
    return _why_not_envpool(env) if is_envpool_env(env) else _why_not_gym(env)


def final_observation_roots(env: Any) -> set[str]:
    """The root keys torchrl's final-observation readers write (a SAME_STEP env's ``"final"``)."""
    return {r.name for r in getattr(env, "info_dict_reader", ()) if _is_final_obs_reader(r)}


def gym_spaces() -> Any:
    """gymnasium's ``spaces`` module (imported when a collector is built, not with this module)."""
    import gymnasium

    return gymnasium.spaces


def _why_not_gym(env: Any) -> str | None:
    """Why the lean loop cannot step this torchrl gymnasium env, or ``None``."""
    if type(env).__name__ not in ("GymWrapper", "GymEnv") or not isinstance(env, GymWrapper):
        return f"the env is a {type(env).__name__}, not a plain torchrl GymWrapper"
    same_step = bool(env.batch_size) and is_same_step(env)
    # torchrl reads a SAME_STEP vector env's final observations from its info dict
    readers = [r for r in env.info_dict_reader if not (same_step and _is_final_obs_reader(r))]
    if getattr(env, "wrapper_frame_skip", 1) != 1 or readers:
        return "the env skips frames or reads its info dict"
    if getattr(env, "from_pixels", False) and not _observes_pixels(env._env):
        return "the env renders pixels (torchrl's from_pixels wrapper)"
    if env.batch_size and getattr(env._env, "autoreset_mode", None) is None:
        return "the vector env has no autoreset_mode"
    if env.batch_size and env._env.autoreset_mode.name not in ("DISABLED", "SAME_STEP"):
        return "the vector env's autoreset_mode is neither DISABLED nor SAME_STEP"
    space, spaces = env._env.observation_space, gym_spaces()
    parts = space.spaces.values() if isinstance(space, spaces.Dict) else [space]
    if not all(isinstance(part, spaces.Box) for part in parts):
        return "the env's observation space is not a Box or a Dict of Boxes"
    return None


def _observes_pixels(env: Any) -> bool:
    """Whether torchrl's ``from_pixels`` comes from ``env``'s own observations (not its wrapper)."""
    from torchrl.envs.libs.gym import _is_from_pixels

    return bool(_is_from_pixels(env))


def is_same_step(env: Any) -> bool:
    """Whether ``env`` wraps a gymnasium vector env that resets in the step (SAME_STEP)."""
    mode = getattr(getattr(env, "_env", None), "autoreset_mode", None)
    return mode is not None and mode.name == "SAME_STEP"


def _is_final_obs_reader(reader: Any) -> bool:
    """Whether ``reader`` is torchrl's reader of a vector env's final observations, and only that."""
    from torchrl.envs.libs.gym import terminal_obs_reader

    return type(reader) is terminal_obs_reader and set(reader.info_spec.keys()) <= {reader.name}


def _why_not_envpool(env: Any) -> str | None:
    """Why the lean loop cannot step this torchrl ``MultiThreadedEnv``, or ``None``."""
    if type(env).__name__ not in ("MultiThreadedEnv", "MultiThreadedEnvWrapper", "EnvPoolEnv"):
        return f"the env is a {type(env).__name__}, not torchrl's own MultiThreadedEnv"
    if len(env._env.spec.observation_space.shape) == 0:
        return "the EnvPool env's observation is not one array"
    return None
