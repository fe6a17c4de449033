"""The fault rows' envs, policies and learners: a copy of what they need from the test kit.

Benchmarks do not import ``tdscheme.testing`` (the test kit is for ``tests/`` only), so
the rows keep their own copy of its faulty env factory (:class:`FaultyEnv`:
sleep, raise, exit, hang or a non-finite number at step N) and its small
deterministic policies and CartPole learner, unchanged, so that the rows measure
what they always have. Ray workers unpickle these by value
(``register_pickle_by_value`` below): a row runs under ``benchmarks/faults.py`` or
as ``benchmarks/fault_rows/liveness.py``, and in the second the workers cannot
import ``fault_rows``.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import gymnasium as gym
import torch
from ray import cloudpickle
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.envs import EnvBase, GymWrapper

from tdscheme import envs

cloudpickle.register_pickle_by_value(sys.modules[__name__])


class FaultyEnv(gym.Wrapper):
    """A gymnasium wrapper that sleeps each step, raises, exits, hangs or gives a bad number at step N.

    Args:
        env: the gymnasium env to wrap.
        sleep_s: seconds to sleep in each ``step``.
        raise_at_step: raise ``RuntimeError`` at this step (counted from 1 over the env's life).
        exit_at_step: ``os._exit(1)`` at this step, killing the process like a crash.
        nonfinite_at_step: from this step on (every step when ``nonfinite_every`` is
            True, else only at it), put ``nonfinite_value`` into ``nonfinite_in``.
        nonfinite_in: ``"reward"`` or ``"observation"`` (its first entry).
        nonfinite_value: e.g. ``float("nan")`` or ``float("inf")``.
        nonfinite_every: every step from ``nonfinite_at_step`` on, not just that one.
        hang_at_step: sleep (nearly) forever at this step, like a hung simulator.
        hang_once_path: with ``hang_at_step``, only the first env to create this
            file hangs (so a rebuilt worker does not hang again).
    """

    def __init__(
        self,
        env: gym.Env,
        *,
        sleep_s: float = 0.0,
        raise_at_step: int | None = None,
        exit_at_step: int | None = None,
        nonfinite_at_step: int | None = None,
        nonfinite_in: str = "reward",
        nonfinite_value: float = float("nan"),
        nonfinite_every: bool = False,
        hang_at_step: int | None = None,
        hang_once_path: str | None = None,
    ) -> None:
        super().__init__(env)
        self.sleep_s = sleep_s
        self.raise_at_step = raise_at_step
        self.exit_at_step = exit_at_step
        self.nonfinite_at_step = nonfinite_at_step
        self.nonfinite_in = nonfinite_in
        self.nonfinite_value = nonfinite_value
        self.nonfinite_every = nonfinite_every
        self.hang_at_step = hang_at_step
        self.hang_once_path = hang_once_path
        self.steps = 0

    def step(self, action: Any) -> Any:
        self.steps += 1
        if self.sleep_s:
            time.sleep(self.sleep_s)
        if self.raise_at_step is not None and self.steps >= self.raise_at_step:
            raise RuntimeError(f"FaultyEnv: injected failure at step {self.steps}")
        if self.exit_at_step is not None and self.steps >= self.exit_at_step:
            os._exit(1)
        if self.hang_at_step is not None and self.steps == self.hang_at_step and self._may_hang():
            time.sleep(24 * 3600)
        obs, reward, terminated, truncated, info = self.env.step(action)
        at = self.nonfinite_at_step
        if at is not None and (self.steps == at or (self.nonfinite_every and self.steps > at)):
            if self.nonfinite_in == "reward":
                reward = self.nonfinite_value
            else:
                obs = obs.copy()
                obs[0] = self.nonfinite_value
        return obs, reward, terminated, truncated, info

    def _may_hang(self) -> bool:
        if self.hang_once_path is None:
            return True
        try:
            with open(self.hang_once_path, "x"):
                return True
        except FileExistsError:
            return False


def make_env(
    env_id: str = "CartPole-v1",
    *,
    num_envs: int = 1,
    sleep_s: float = 0.0,
    raise_at_step: int | None = None,
    exit_at_step: int | None = None,
    hang_at_step: int | None = None,
    hang_once_path: str | None = None,
    obs_shape: tuple[int, ...] | None = None,
    nonfinite_at_step: int | None = None,
    nonfinite_in: str = "reward",
    nonfinite_value: float = float("nan"),
    nonfinite_every: bool = False,
) -> EnvBase:
    """Builds a torchrl env from a gymnasium id, optionally batched or faulty.

    Without faults or ``obs_shape`` this is :func:`tdscheme.envs.make_env`.

    Args:
        env_id: a gymnasium env id.
        num_envs: ``> 1`` steps that many copies in one process (gymnasium's
            synchronous vector env), batch size ``[num_envs]``.
        sleep_s, raise_at_step, exit_at_step, hang_at_step, hang_once_path,
            nonfinite_at_step, nonfinite_in, nonfinite_value, nonfinite_every: see
            :class:`FaultyEnv` (single env only).
        obs_shape: if given, replaces observations with uint8 frames of this
            shape (e.g. ``(4, 84, 84)``), to measure large-observation transport.

    Returns:
        A torchrl ``EnvBase``.

    Raises:
        ValueError: faults or ``obs_shape`` with ``num_envs > 1``, or ``num_envs < 1``.
    """
    faulty = bool(
        sleep_s or raise_at_step or exit_at_step or hang_at_step or obs_shape or nonfinite_at_step
    )
    if not faulty:
        return envs.make_env(env_id, num_envs=num_envs)
    if num_envs > 1:
        raise ValueError("make_env: faults and obs_shape need num_envs=1")
    env: gym.Env = gym.make(env_id)
    if obs_shape is not None:
        env = PixelsLikeObs(env, obs_shape)
    env = FaultyEnv(
        env, sleep_s=sleep_s, raise_at_step=raise_at_step, exit_at_step=exit_at_step,
        hang_at_step=hang_at_step, hang_once_path=hang_once_path,
        nonfinite_at_step=nonfinite_at_step, nonfinite_in=nonfinite_in,
        nonfinite_value=nonfinite_value, nonfinite_every=nonfinite_every,
    )  # fmt: skip
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


def cartpole_modules(*, num_cells: int = 32) -> dict[str, nn.Module]:
    """A CartPole actor (logits -> one-hot categorical action) and critic: a ``policy_factory``.

    Module-level (and configurable with ``functools.partial``) so that Ray
    gradient workers import it by reference.

    Args:
        num_cells: hidden units of the actor's and the critic's one hidden layer.

    Returns:
        ``{"actor": ProbabilisticActor, "critic": ValueOperator}``.

    Example:
        >>> sorted(cartpole_modules(num_cells=8))
        ['actor', 'critic']
    """
    from torchrl.data import OneHot
    from torchrl.modules import MLP, OneHotCategorical, ProbabilisticActor, ValueOperator

    actor = ProbabilisticActor(
        TensorDictModule(
            MLP(in_features=4, out_features=2, num_cells=[num_cells]),
            in_keys=["observation"],
            out_keys=["logits"],
        ),
        in_keys=["logits"],
        out_keys=["action"],
        distribution_class=OneHotCategorical,
        spec=OneHot(2),
        return_log_prob=True,
    )
    critic = ValueOperator(
        MLP(in_features=4, out_features=1, num_cells=[num_cells]), in_keys=["observation"]
    )
    return {"actor": actor, "critic": critic}


def cartpole_learner(
    *,
    actor: nn.Module,
    critic: nn.Module,
    loss: str = "a2c",
    lr: float = 3e-3,
    max_grad_norm: float | None = 1.0,
    entropy_coef: float = 0.01,
    gamma: float = 0.99,
    lmbda: float = 0.95,
    optimizer: Any = None,
) -> Any:
    """A Learner for :func:`cartpole_modules`: A2C or clipped PPO with GAE, Adam.

    A ``learner_factory``: ``cartpole_learner(**cartpole_modules())``. PPO
    advantages are not normalized, so a gradient over a concatenated batch is the
    frame-weighted average of the gradients over its parts.

    Args:
        actor: the actor of :func:`cartpole_modules`.
        critic: the critic of :func:`cartpole_modules`.
        loss: ``"a2c"`` (torchrl ``A2CLoss``) or ``"ppo"`` (``ClipPPOLoss``).
        lr: Adam learning rate.
        max_grad_norm: gradient clipping (``None``: none).
        entropy_coef: entropy bonus coefficient.
        gamma: discount.
        lmbda: GAE lambda.
        optimizer: a factory ``params -> torch.optim.Optimizer`` (e.g.
            ``functools.partial(torch.optim.SGD, lr=1.0)``); ``None``: Adam(``lr``).

    Returns:
        A :class:`tdscheme.learner.Learner`.

    Raises:
        ValueError: ``loss`` is not ``"a2c"`` or ``"ppo"``.

    Example:
        >>> cartpole_learner(**cartpole_modules(num_cells=8), loss="ppo").version
        0
    """
    from torchrl.objectives import A2CLoss, ClipPPOLoss
    from torchrl.objectives.value import GAE

    from tdscheme.learner import Learner, LearnerConfig

    if loss == "a2c":
        loss_module = A2CLoss(actor, critic, entropy_coeff=entropy_coef)
    elif loss == "ppo":
        loss_module = ClipPPOLoss(
            actor, critic, entropy_coeff=entropy_coef, normalize_advantage=False
        )
    else:
        raise ValueError(f"loss={loss!r} is not one of ['a2c', 'ppo']")
    return Learner(
        loss_module,
        config=LearnerConfig(lr=lr, max_grad_norm=max_grad_norm),
        optimizer=optimizer,
        value_estimator=GAE(gamma=gamma, lmbda=lmbda, value_network=critic),
    )


def alive_actor_ids() -> set[str]:
    """The ids of the Ray actors that are not dead (needs a connected Ray)."""
    # ray.util.state needs the dashboard, which a test Ray does not run; the GCS actor
    # table is the same information (test-only use of a private module).
    from ray._private.state import state

    return {aid for aid, info in state.actor_table(None).items() if info["State"] != "DEAD"}
