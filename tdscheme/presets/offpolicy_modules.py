"""Networks and replay buffers of the off-policy presets (DQN, SAC, TD3, DDPG).

Everything here is a module-level function of plain arguments, so that
``functools.partial`` of it pickles by reference into Ray workers.

Example:
    >>> modules = offpolicy_modules("CartPole-v1", algo="dqn", hidden_sizes=(8,))
    >>> sorted(modules)
    ['actor', 'qvalue']
    >>> from tdscheme.presets.actor_critic import train_env
    >>> modules = offpolicy_modules("Pendulum-v1", algo="td3", hidden_sizes=(8,))
    >>> td = modules["actor"](train_env("Pendulum-v1", num_envs=2).reset())
    >>> td["action"].shape, bool(td["action"].abs().max() <= 2.0)
    (torch.Size([2, 1]), True)
    >>> replay_buffer(size=100, batch_size=8).sample  # doctest: +ELLIPSIS
    <bound method ...>
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import gymnasium
import torch
from tensordict.nn import NormalParamExtractor, TensorDictModule, TensorDictSequential
from torch import nn
from torchrl.data import (
    Bounded,
    Categorical,
    LazyTensorStorage,
    OneHot,
    TensorDictReplayBuffer,
)
from torchrl.modules import (
    MLP,
    AdditiveGaussianModule,
    EGreedyModule,
    ProbabilisticActor,
    QValueActor,
    TanhNormal,
    ValueOperator,
)
from torchrl.modules.models import DuelingCnnDQNet, DuelingMlpDQNet

from tdscheme.envs import is_atari_id, make_env
from tdscheme.presets.actor_critic import ACTIVATIONS
from tdscheme.presets.pixel_networks import PIXEL_NETWORKS, PixelScale, conv_settings, pixel_trunk
from tdscheme.presets.preset_envs import eval_env
from tdscheme.presets.settings import OFFPOLICY_ALGOS, OffPolicyConfig
from tdscheme.replay.n_step import NStep
from tdscheme.replay.prioritized import prioritized_buffer, prioritized_sampler
from tdscheme.replay.ray_held import ray_buffer_kwargs
from tdscheme.rollout.exploration import PerWorkerEGreedy
from tdscheme.validation import check_choice, invalid

__all__ = [
    "OFFPOLICY_ALGOS",
    "OffPolicyConfig",
    "offpolicy_modules",
    "pixel_qnet",
    "replay_buffer",
]


def _env_specs(env_id: str, backend: str = "gymnasium") -> tuple[Any, Any]:
    """The observation's shape (an int: flat; a tuple: stacked frames) and the action spec."""
    if is_atari_id(env_id):  # stacked frames, index actions (make_atari_env)
        probe = eval_env(env_id, backend=backend)
        try:
            return tuple(probe.observation_spec_unbatched["observation"].shape), (
                probe.action_spec_unbatched.clone()
            )
        finally:
            probe.close()
    try:
        probe = make_env(env_id)
    except gymnasium.error.DependencyNotInstalled as err:
        raise ImportError(
            f"env_id={env_id!r} needs a package that is not installed ({err}); for MuJoCo "
            f"envs: pip install -c constraints.txt -e '.[mujoco]'"
        ) from err
    try:
        obs_shape = probe.observation_spec["observation"].shape
        action_spec = probe.action_spec.clone()
    finally:
        probe.close()
    if len(obs_shape) != 1:
        raise invalid("env_id", env_id, "an env with flat observations")
    return obs_shape[0], action_spec


def offpolicy_modules(
    env_id: str,
    *,
    algo: str,
    hidden_sizes: Sequence[int] = (64, 64),
    activation: str = "relu",
    eps_init: float = 1.0,
    eps_end: float = 0.05,
    exploration_frames: int = 10_000,
    noise_sigma: float = 0.1,
    noise_sigma_end: float = 0.1,
    dueling: bool = False,
    worker_eps: float | None = None,
    backend: str = "gymnasium",
) -> dict[str, nn.Module]:
    """The networks of ``algo`` for ``env_id``'s spaces.

    An Atari id (stacked uint8 frames, index actions) gets Mnih et al.'s CNN for DQN: a
    linear Q head on :func:`~tdscheme.presets.pixel_networks.pixel_trunk`'s ``"nature"``
    trunk, or with ``dueling`` torchrl's ``DuelingCnnDQNet`` (the same convolutions, value
    and advantage streams of 512 units: Wang et al. 2016, as in Ape-X).

    Args:
        env_id: a gymnasium env id (one env is built to read its specs).
        backend: the env's backend (``"envpool"`` for an EnvPool Atari id).
        algo: ``"dqn"`` (discrete actions), ``"sac"``, ``"td3"`` or ``"ddpg"`` (box actions).
        hidden_sizes, activation: each network's hidden layers.
        eps_init, eps_end, exploration_frames: DQN's epsilon-greedy schedule.
        noise_sigma, noise_sigma_end, exploration_frames: TD3's and DDPG's Gaussian
            action noise.
        dueling: DQN: a dueling Q-network (torchrl's ``DuelingMlpDQNet``).
        worker_eps: DQN: Ape-X's epsilon per worker (``PerWorkerEGreedy``) instead of
            the annealed schedule.

    Returns:
        ``{"actor": the collection policy, "qvalue": the Q-network}``; DQN's actor is
        the Q-value actor followed by an ``EGreedyModule``, SAC's a tanh-normal
        ``ProbabilisticActor``, TD3's and DDPG's a deterministic tanh actor followed
        by an ``AdditiveGaussianModule`` (also under ``"policy"`` without the noise).

    Raises:
        ValueError: an unknown ``algo``, or an action space ``algo`` cannot act in.
    """
    check_choice("algo", algo, OFFPOLICY_ALGOS)
    obs_dim, action_spec = _env_specs(env_id, backend)
    act = ACTIVATIONS[activation]
    if isinstance(obs_dim, tuple):  # stacked frames
        if algo != "dqn" or not isinstance(action_spec, Categorical):
            raise invalid("algo", algo, "'dqn'", context=f"env_id={env_id!r} (pixels)")
        net = pixel_qnet(action_spec.space.n, obs_dim, dueling=dueling)
        return _dqn_modules(net, action_spec, eps_init, eps_end, exploration_frames, worker_eps)

    def mlp(in_features: int, out_features: int) -> MLP:
        return MLP(
            in_features=in_features, out_features=out_features,
            num_cells=list(hidden_sizes), activation_class=act,
        )  # fmt: skip

    if algo == "dqn":
        if not isinstance(action_spec, OneHot):
            raise invalid("env_id", env_id, "an env with discrete actions", context="algo='dqn'")
        actions = action_spec.shape[-1]
        net = dueling_mlp(obs_dim, actions, hidden_sizes, act) if dueling else mlp(obs_dim, actions)
        return _dqn_modules(net, action_spec, eps_init, eps_end, exploration_frames, worker_eps)
    if not (isinstance(action_spec, Bounded) and action_spec.ndim == 1):
        raise invalid("env_id", env_id, "an env with a 1-D box action", context=f"algo={algo!r}")
    n = action_spec.shape[-1]
    qvalue = ValueOperator(mlp(obs_dim + n, 1), in_keys=["observation", "action"])
    if algo == "sac":
        net = nn.Sequential(mlp(obs_dim, 2 * n), NormalParamExtractor())
        actor = ProbabilisticActor(
            TensorDictModule(net, in_keys=["observation"], out_keys=["loc", "scale"]),
            in_keys=["loc", "scale"], out_keys=["action"], distribution_class=TanhNormal,
            distribution_kwargs={"low": action_spec.space.low, "high": action_spec.space.high},
            spec=action_spec, return_log_prob=False,
        )  # fmt: skip
        return {"actor": actor, "qvalue": qvalue}
    policy = TensorDictModule(
        nn.Sequential(mlp(obs_dim, n), nn.Tanh(), _Rescale(action_spec)),
        in_keys=["observation"], out_keys=["action"],
    )  # fmt: skip
    noise = AdditiveGaussianModule(
        action_spec, sigma_init=noise_sigma, sigma_end=noise_sigma_end,
        annealing_num_steps=exploration_frames,
    )  # fmt: skip
    return {"actor": TensorDictSequential(policy, noise), "policy": policy, "qvalue": qvalue}


def _dqn_modules(
    net: nn.Module,
    action_spec: Any,
    eps_init: float,
    eps_end: float,
    exploration_frames: int,
    worker_eps: float | None,
) -> dict[str, nn.Module]:
    """DQN's Q-value actor over ``net`` and its epsilon-greedy collection policy."""
    qvalue = QValueActor(net, in_keys=["observation"], spec=action_spec)
    greedy = (
        EGreedyModule(
            action_spec, eps_init=eps_init, eps_end=eps_end, annealing_num_steps=exploration_frames
        )
        if worker_eps is None
        else PerWorkerEGreedy(action_spec, eps=worker_eps)
    )
    return {"actor": TensorDictSequential(qvalue, greedy), "qvalue": qvalue}


def pixel_qnet(actions: int, frame_shape: Sequence[int], *, dueling: bool = False) -> nn.Module:
    """A Q-network over ``[*batch, C, H, W]`` uint8 frames: Mnih et al.'s convolutions.

    Plain: a linear head on :func:`~tdscheme.presets.pixel_networks.pixel_trunk`
    (``"nature"``, 512 units). Dueling: torchrl's ``DuelingCnnDQNet`` with every size given
    (no lazy layer), ReLU throughout as in the paper (torchrl's default is ELU), after
    :class:`~tdscheme.presets.pixel_networks.PixelScale`.
    """
    if not dueling:
        trunk = pixel_trunk(frame_shape, network="nature")
        return nn.Sequential(trunk, nn.Linear(PIXEL_NETWORKS["nature"][1], actions))
    cnn, flat = conv_settings(frame_shape, "nature")
    hidden = PIXEL_NETWORKS["nature"][1]
    mlp = {"in_features": flat, "num_cells": [hidden], "activation_class": nn.ReLU}
    return nn.Sequential(PixelScale(), DuelingCnnDQNet(actions, 1, cnn_kwargs=cnn, mlp_kwargs=mlp))


def dueling_mlp(
    obs_dim: int, actions: int, hidden_sizes: Sequence[int], act: type[nn.Module]
) -> nn.Module:
    """torchrl's dueling Q-network: a shared trunk of ``hidden_sizes``, one hidden layer of the
    last size in each of the value and advantage heads (sizes given: no lazy layers)."""
    width = hidden_sizes[-1]
    return DuelingMlpDQNet(
        actions,
        mlp_kwargs_feature={"in_features": obs_dim, "num_cells": list(hidden_sizes[:-1]),
                            "out_features": width, "activation_class": act},
        mlp_kwargs_output={"in_features": width, "depth": 1, "num_cells": width,
                           "activation_class": act},
    )  # fmt: skip


class _Rescale(nn.Module):
    """Maps ``[-1, 1]`` onto the box ``[low, high]`` of an action spec (buffers, so they travel)."""

    def __init__(self, spec: Bounded) -> None:
        super().__init__()
        low, high = spec.space.low.float(), spec.space.high.float()
        self.register_buffer("center", (high + low) / 2)
        self.register_buffer("half_width", (high - low) / 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.center + self.half_width * x


def replay_buffer(
    *,
    size: int,
    batch_size: int,
    prioritized: bool = False,
    alpha: float = 0.6,
    beta: float = 0.4,
    ray_held: bool = False,
    ndim: int = 1,
    shards: int = 0,
    gamma: float = 0.99,
    n_steps: int = 1,
) -> Any:
    """A torchrl replay buffer of TensorDicts (``index`` in each sample).

    Args:
        size: frames held (``LazyTensorStorage``).
        batch_size: frames per ``sample()``.
        prioritized: sampled by priority (torchrl's ``PrioritizedSampler``, or tdscheme's
            sum tree where torchrl's extension does not load:
            :func:`~tdscheme.replay.prioritized.prioritized_sampler`).
        alpha, beta: prioritized replay's exponents.
        ray_held: a ``RayReplayBuffer`` (an actor) that collector workers write into.
        ndim: the storage's batch dims per write: 2 for workers that write
            ``[num_envs, time]`` batches into a Ray-held buffer (sampled frame by frame).
        shards: Ape-X's replay: a :class:`~tdscheme.replay.sharded.ShardedReplayBuffer` of
            ``shards`` prioritized shards of ``size / shards`` frames, the workers writing
            their own TD errors (``gamma``) as priorities; 0: one buffer.
        n_steps: with ``ray_held`` or ``shards``: the n-step returns the workers write
            (the buffer's ``n_step``, which a ``RayCollector`` writing into it takes).

    Returns:
        The buffer.
    """
    n_step = NStep(n_steps, gamma) if n_steps > 1 else None
    if shards > 0:
        from tdscheme.replay.priorities import QLearningPriority
        from tdscheme.replay.sharded import ShardedReplayBuffer

        return ShardedReplayBuffer(
            num_shards=shards, frames_per_shard=max(1, size // shards), batch_size=batch_size,
            alpha=alpha, beta=beta, priority_fn=QLearningPriority(gamma), n_step=n_step,
        )  # fmt: skip
    if ray_held:
        from torchrl.data.replay_buffers.ray_buffer import RayReplayBuffer

        storage = functools.partial(LazyTensorStorage, size, ndim=ndim)
        if not prioritized:
            buffer = RayReplayBuffer(storage=storage, batch_size=batch_size, **ray_buffer_kwargs())
        else:  # the sampler is built in the buffer's actor (torchrl's rule for its parts)
            sampler = functools.partial(prioritized_sampler, size, alpha, beta)
            buffer = RayReplayBuffer(
                storage=storage, sampler=sampler, batch_size=batch_size,
                **ray_buffer_kwargs(TensorDictReplayBuffer),
            )  # fmt: skip
        buffer.n_step = n_step  # read by the RayCollector writing into it (replay_n_step)
        return buffer
    if n_step is not None:
        raise invalid("n_steps", n_steps, "1", context="a driver-held buffer")
    if prioritized:
        return prioritized_buffer(size=size, batch_size=batch_size, alpha=alpha, beta=beta)
    return TensorDictReplayBuffer(storage=LazyTensorStorage(size), batch_size=batch_size)
