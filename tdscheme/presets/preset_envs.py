"""The presets' envs: training copies that record episodes, evaluation copies with the env's own rewards.

Module-level functions of plain arguments, so that ``functools.partial`` of them
pickles by reference into Ray workers; gymnasium ids, EnvPool and Atari alike.

Example:
    >>> env = train_env("CartPole-v1", num_envs=2)
    >>> sorted(env.reset().keys())
    ['done', 'episode_reward', 'observation', 'step_count', 'terminated', 'truncated']
    >>> env.close()
"""

from __future__ import annotations

from typing import Any

import torch
from torchrl.envs import (
    Compose,
    DoubleToFloat,
    EnvBase,
    RewardScaling,
    RewardSum,
    StepCounter,
    TransformedEnv,
)

from tdscheme.envs import is_atari_id, make_atari_env, make_env
from tdscheme.envs.env_config import env_config_target, make_configurable_env
from tdscheme.validation import invalid

__all__ = ["configured_env", "eval_env", "train_env"]


def train_env(
    env_id: str,
    *,
    num_envs: int = 1,
    reward_scale: float = 1.0,
    backend: str = "gymnasium",
    configurable: bool = False,
    env_config: dict[str, Any] | None = None,
) -> EnvBase:
    """A training env: ``num_envs`` batched copies that record episode return and length.

    Args:
        env_id: a gymnasium env id.
        num_envs: copies stepped together in this process.
        reward_scale: multiplies the reward the learner sees; ``("next",
            "episode_reward")`` sums the unscaled rewards.
        backend: :func:`tdscheme.envs.make_env`'s ``backend``.
        configurable: each gymnasium copy takes env configs that set its attributes
            (:func:`~tdscheme.envs.env_config.make_configurable_env`; gymnasium only).
        env_config: attributes set on every copy once built (``None``: none); the env
            is then configurable.

    Returns:
        A torchrl env with ``RewardSum`` and ``StepCounter`` transforms; an Atari id
        (``"ALE/Pong-v5"``) is :func:`~tdscheme.envs.make_atari_env`'s pixels with
        rewards clipped to [-1, 1] (its reward scaling).

    Raises:
        ValueError: ``reward_scale`` is not 1 with an Atari id.
    """
    if is_atari_id(env_id):
        if reward_scale != 1.0:
            raise invalid(
                "reward_scale", reward_scale, "1.0 (Atari rewards are clipped to [-1, 1])",
                context=f"env_id={env_id!r}",
            )  # fmt: skip
        return make_atari_env(env_id, num_envs=num_envs, backend=backend)
    if configurable or env_config is not None:
        env = configured_env(env_id, num_envs=num_envs, env_config=env_config)
    else:
        env = make_env(env_id, num_envs=num_envs, backend=backend)
    transforms = [*_float32(env), RewardSum(), StepCounter()]
    if reward_scale != 1.0:
        transforms.append(RewardScaling(loc=0.0, scale=reward_scale))
    return TransformedEnv(env, Compose(*transforms))


def eval_env(
    env_id: str,
    *,
    num_envs: int = 1,
    backend: str = "gymnasium",
    render_mode: str | None = None,
    env_config: dict[str, Any] | None = None,
) -> EnvBase:
    """An evaluation env: ``num_envs`` batched copies with the env's own rewards.

    Args:
        env_id: a gymnasium env id.
        num_envs: copies stepped together.
        backend: :func:`tdscheme.envs.make_env`'s ``backend``.
        render_mode: ``"rgb_array"`` for videos (``backend="gymnasium"`` only).
        env_config: attributes set on every copy once built (``None``: none).

    Returns:
        A torchrl env (float64 observations as float32, as in training); an Atari id's
        rewards are the game's own (not clipped).
    """
    if is_atari_id(env_id):
        return make_atari_env(
            env_id, num_envs=num_envs, backend=backend, clip_rewards=False,
            render_mode=render_mode,
        )  # fmt: skip
    if env_config is not None:
        env = configured_env(env_id, num_envs=num_envs, env_config=env_config,
                             render_mode=render_mode)  # fmt: skip
    else:
        env = make_env(env_id, num_envs=num_envs, backend=backend, render_mode=render_mode)
    transforms = _float32(env)
    return TransformedEnv(env, Compose(*transforms)) if transforms else env


def configured_env(
    env_id: str, *, num_envs: int, env_config: dict[str, Any] | None, **make_kwargs: Any
) -> EnvBase:
    """A configurable gymnasium env (each copy in ``EnvAttributes``) with ``env_config`` set.

    Example:
        >>> env = configured_env("Pendulum-v1", num_envs=2, env_config={"max_torque": 1.0})
        >>> [copy.unwrapped.max_torque for copy in env._env.envs]
        [1.0, 1.0]
        >>> env.close()
    """
    env = make_configurable_env(env_id, num_envs=num_envs, **make_kwargs)
    if env_config is not None:
        env_config_target(env).apply(env_config)
    return env


def _float32(env: EnvBase) -> list[DoubleToFloat]:
    """torchrl's ``DoubleToFloat`` when the env observes float64 (MuJoCo does); else nothing.

    The presets' networks are float32, as torchrl's sota-implementations' are.
    """
    spec = env.observation_spec
    double = any(leaf.dtype == torch.float64 for leaf in spec.values(True, True))
    return [DoubleToFloat()] if double else []
