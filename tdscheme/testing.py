"""Deterministic policies and (faulty) env factories, importable by Ray workers.

Tests, examples and benchmarks use these so that the objects they send to Ray
workers pickle by reference. Everything here is real: real gymnasium envs
wrapped by torchrl, real ``TensorDictModule`` policies.

Example:
    >>> env = make_env("Pendulum-v1")
    >>> policy = bias_policy(3, 1, bias=0.5)
    >>> rollout = env.rollout(3, policy)
    >>> rollout["action"].flatten().tolist()
    [0.5, 0.5, 0.5]
"""

from __future__ import annotations

import os
import time
from typing import Any

import gymnasium as gym
import torch
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.envs import EnvBase, GymEnv, GymWrapper


class FaultyEnv(gym.Wrapper):
    """A gymnasium wrapper that sleeps at every step, raises or exits the process at step N.

    Args:
        env: the gymnasium env to wrap.
        sleep_s: seconds to sleep in each ``step``.
        raise_at_step: raise ``RuntimeError`` at this step (counted from 1 over the env's life).
        exit_at_step: ``os._exit(1)`` at this step, killing the process like a crash.
    """

    def __init__(
        self,
        env: gym.Env,
        *,
        sleep_s: float = 0.0,
        raise_at_step: int | None = None,
        exit_at_step: int | None = None,
    ) -> None:
        super().__init__(env)
        self.sleep_s = sleep_s
        self.raise_at_step = raise_at_step
        self.exit_at_step = exit_at_step
        self.steps = 0

    def step(self, action: Any) -> Any:
        self.steps += 1
        if self.sleep_s:
            time.sleep(self.sleep_s)
        if self.raise_at_step is not None and self.steps >= self.raise_at_step:
            raise RuntimeError(f"FaultyEnv: injected failure at step {self.steps}")
        if self.exit_at_step is not None and self.steps >= self.exit_at_step:
            os._exit(1)
        return self.env.step(action)


def make_env(
    env_id: str = "CartPole-v1",
    *,
    num_envs: int = 1,
    sleep_s: float = 0.0,
    raise_at_step: int | None = None,
    exit_at_step: int | None = None,
    obs_shape: tuple[int, ...] | None = None,
) -> EnvBase:
    """Builds a torchrl env from a gymnasium id, optionally batched or faulty.

    Args:
        env_id: a gymnasium env id.
        num_envs: ``> 1`` steps that many copies in one process (gymnasium's
            synchronous vector env), batch size ``[num_envs]``.
        sleep_s, raise_at_step, exit_at_step: see :class:`FaultyEnv` (single env only).
        obs_shape: if given, replaces observations with uint8 frames of this
            shape (e.g. ``(4, 84, 84)``), to measure large-observation transport.

    Returns:
        A torchrl ``EnvBase``.
    """
    if num_envs > 1:
        if sleep_s or raise_at_step or exit_at_step or obs_shape:
            raise ValueError("make_env: faults and obs_shape need num_envs=1")
        vec = gym.make_vec(
            env_id,
            num_envs=num_envs,
            vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
        )
        return GymWrapper(vec)
    if not (sleep_s or raise_at_step or exit_at_step or obs_shape):
        return GymEnv(env_id)
    env: gym.Env = gym.make(env_id)
    if obs_shape is not None:
        env = PixelsLikeObs(env, obs_shape)
    env = FaultyEnv(env, sleep_s=sleep_s, raise_at_step=raise_at_step, exit_at_step=exit_at_step)
    return GymWrapper(env)


class PixelsLikeObs(gym.ObservationWrapper):
    """Replaces observations with deterministic uint8 frames of a given shape."""

    def __init__(self, env: gym.Env, shape: tuple[int, ...]) -> None:
        super().__init__(env)
        self.observation_space = gym.spaces.Box(0, 255, shape=shape, dtype="uint8")
        self._count = 0

    def observation(self, observation: Any) -> Any:
        import numpy as np

        self._count += 1
        return np.full(self.observation_space.shape, self._count % 256, dtype=np.uint8)


def bias_policy(
    obs_dim: int, action_dim: int, *, bias: float = 0.0, obs_key: str = "observation"
) -> TensorDictModule:
    """A linear policy with zero weights: its action equals its bias.

    Pushing weights with another bias changes every later action to that bias,
    which is how tests see which weights a worker runs.

    Args:
        obs_dim: observation size.
        action_dim: action size.
        bias: the constant action.
        obs_key: the observation key.

    Returns:
        A ``TensorDictModule`` writing ``"action"``.
    """
    linear = nn.Linear(obs_dim, action_dim)
    with torch.no_grad():
        linear.weight.zero_()
        linear.bias.fill_(bias)
    return TensorDictModule(linear, in_keys=[obs_key], out_keys=["action"])


class OneHotArgmax(nn.Module):
    """Turns logits into the one-hot action torchrl's discrete gym envs expect."""

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).to(torch.int64)


def mlp_policy(
    obs_dim: int,
    action_dim: int,
    *,
    hidden: int = 64,
    depth: int = 2,
    discrete: bool = True,
    obs_key: str = "observation",
) -> TensorDictModule:
    """A deterministic MLP policy (``depth`` hidden layers of ``hidden`` units).

    Args:
        obs_dim: flat observation size.
        action_dim: number of actions (discrete, one-hot output) or action size.
        hidden: hidden units per layer.
        depth: number of hidden layers.
        discrete: one-hot argmax actions (CartPole) or tanh-bounded continuous ones.
        obs_key: the observation key.

    Returns:
        A ``TensorDictModule`` writing ``"action"``.
    """
    layers: list[nn.Module] = []
    size = obs_dim
    for _ in range(depth):
        layers += [nn.Linear(size, hidden), nn.Tanh()]
        size = hidden
    layers.append(nn.Linear(size, action_dim))
    layers.append(OneHotArgmax() if discrete else nn.Tanh())
    return TensorDictModule(nn.Sequential(*layers), in_keys=[obs_key], out_keys=["action"])
