"""Off-policy presets: DQN on CartPole, SAC and TD3 on Pendulum, SAC on HalfCheetah (MuJoCo).

Each is an :class:`OffPolicyPreset`: a :class:`~tdscheme.presets.Preset` whose
factories include the replay buffer (``storage_factory``), so its Scheme trains
off-policy (see :class:`~tdscheme.scheme.off_policy_loop.OffPolicyLoop`).
The learners and factories import torch and torchrl when they are called, so
that making a preset (and the command's check of its settings) does not.

Example:
    >>> preset = dqn_cartpole()
    >>> preset.scheme.utd_ratio, type(preset.factories()["storage_factory"]()).__name__
    (0.25, 'TensorDictReplayBuffer')
    >>> learner = preset.learner_factory()(**preset.policy_factory()())
    >>> type(learner.loss_module).__name__, type(learner.target_updater).__name__
    ('DQNLoss', 'HardUpdate')
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from tdscheme.engine.trainer_config import TrainerConfig
from tdscheme.presets.preset import Preset
from tdscheme.presets.settings import OffPolicyConfig
from tdscheme.scheme.config import SchemeConfig
from tdscheme.validation import invalid

if TYPE_CHECKING:
    from torch import nn

    from tdscheme.learner import OffPolicyLearner

__all__ = [
    "OffPolicyPreset",
    "dqn_cartpole",
    "dqn_learner",
    "sac_halfcheetah",
    "sac_learner",
    "sac_pendulum",
    "td3_learner",
    "td3_pendulum",
]


def _learner(loss: Any, policy: nn.Module, config: OffPolicyConfig) -> OffPolicyLearner:
    from tdscheme.learner import LearnerConfig, OffPolicyLearner, make_target_updater

    loss.make_value_estimator(gamma=config.gamma)
    return OffPolicyLearner(
        loss,
        target_updater=partial(
            make_target_updater, kind=config.target_update, tau=config.tau,
            hard_update_interval=config.hard_update_interval,
        ),
        config=LearnerConfig(
            lr=config.lr, max_grad_norm=config.max_grad_norm, device=config.device,
            max_nonfinite_updates=config.max_nonfinite_updates,
            drop_nonfinite_frames=config.drop_nonfinite_frames,
        ),
        policy=policy,
    )  # fmt: skip


def dqn_learner(
    *, actor: nn.Module, qvalue: nn.Module, config: OffPolicyConfig, **_: Any
) -> OffPolicyLearner:
    """torchrl's ``DQNLoss`` (target network, double DQN) in an OffPolicyLearner.

    Args:
        actor: the epsilon-greedy collection policy (over ``qvalue``).
        qvalue: the Q-value actor.
        config: loss, optimizer and target-update hyperparameters.
    """
    from torchrl.objectives import DQNLoss

    # one-hot actions (gymnasium's discrete spaces), or indices (Atari's, from a pixel env)
    action_space = getattr(qvalue, "action_space", None) or "one-hot"
    loss = DQNLoss(qvalue, action_space=action_space, delay_value=True, double_dqn=True)
    return _learner(loss, actor, config)


def sac_learner(
    *, actor: nn.Module, qvalue: nn.Module, config: OffPolicyConfig, **_: Any
) -> OffPolicyLearner:
    """torchrl's ``SACLoss`` (two Q-networks, learned temperature) in an OffPolicyLearner."""
    from torchrl.objectives import SACLoss

    loss = SACLoss(actor, qvalue, num_qvalue_nets=2, action_spec=actor.spec)
    return _learner(loss, actor, config)


def td3_learner(
    *, actor: nn.Module, policy: nn.Module, qvalue: nn.Module, config: OffPolicyConfig, **_: Any
) -> OffPolicyLearner:
    """torchrl's ``TD3Loss`` (target actor and Q-networks, target smoothing) in an OffPolicyLearner.

    Args:
        actor: the collection policy (``policy`` followed by Gaussian action noise).
        policy: the deterministic actor the loss trains.
        qvalue: the Q-network.
        config: loss, optimizer and target-update hyperparameters.
    """
    from torchrl.objectives import TD3Loss

    spec = actor[-1].spec if hasattr(actor[-1], "spec") else None
    loss = TD3Loss(policy, qvalue, action_spec=spec, num_qvalue_nets=2)
    return _learner(loss, actor, config)


@dataclasses.dataclass
class OffPolicyPreset(Preset):
    """A :class:`~tdscheme.presets.Preset` that trains off-policy from a replay buffer.

    The other arguments are :class:`~tdscheme.presets.Preset`'s; ``algo`` is an
    :class:`~tdscheme.presets.offpolicy_modules.OffPolicyConfig`.

    Args:
        algo_name: ``"dqn"``, ``"sac"``, ``"td3"`` or ``"ddpg"`` (the networks built).
    """

    algo_name: str = "dqn"

    def __post_init__(self) -> None:
        shards = getattr(self.algo, "replay_shards", 0)
        n_steps = getattr(self.algo, "n_steps", 1)
        if shards and self.algo_name != "dqn":
            raise invalid(
                "replay_shards", shards, "0", context=f"algo {self.algo_name!r} (Ape-X's replay is DQN's)"
            )  # fmt: skip
        if shards and self.scheme.buffer_location == "driver":
            raise invalid(
                "replay_shards", shards, "0", context="buffer_location='driver' (shards are Ray-held)"
            )  # fmt: skip
        if n_steps > 1 and self.scheme.buffer_location == "driver":
            raise invalid(
                "n_steps", n_steps, "1", context="buffer_location='driver' (n-step returns are "
                "computed by the workers that write into a Ray-held buffer)",
            )  # fmt: skip
        if (shards or n_steps > 1) and self.scheme.buffer_location == "auto":  # workers write
            self.scheme = dataclasses.replace(self.scheme, buffer_location="ray")

    def policy_factory(self) -> Callable[[], dict[str, nn.Module]]:
        """Builds ``{"actor": collection policy, "qvalue": ..., ...}``."""
        from tdscheme.presets.offpolicy_modules import offpolicy_modules

        a = self.algo
        return partial(
            offpolicy_modules, a.env_id, algo=self.algo_name, hidden_sizes=a.hidden_sizes,
            activation=a.activation, eps_init=a.eps_init, eps_end=a.eps_end,
            exploration_frames=a.exploration_frames, noise_sigma=a.noise_sigma,
            noise_sigma_end=a.noise_sigma_end, dueling=a.dueling, worker_eps=a.worker_eps,
            backend=a.env_backend,
        )  # fmt: skip

    def learner_factory(self) -> Callable[..., OffPolicyLearner]:
        """Builds the OffPolicyLearner from the modules of :meth:`policy_factory`."""
        return partial(self.learner_builder, config=self.algo)

    def storage_factory(self) -> Callable[[], Any]:
        """Builds the replay buffer where ``scheme.replay_location()`` says."""
        from tdscheme.presets.offpolicy_modules import replay_buffer

        a = self.algo
        ray_held = self.scheme.replay_location() == "ray"
        return partial(
            replay_buffer, size=a.buffer_size, batch_size=a.batch_size,
            prioritized=a.prioritized, alpha=a.priority_alpha, beta=a.priority_beta,
            ray_held=ray_held, ndim=2 if ray_held and a.num_envs > 1 else 1,
            shards=a.replay_shards, gamma=a.gamma, n_steps=a.n_steps,
        )  # fmt: skip

    def factories(self) -> dict[str, Callable[..., Any]]:
        """The five factories, as keyword arguments for :class:`~tdscheme.Scheme`."""
        return {**super().factories(), "storage_factory": self.storage_factory()}


def dqn_cartpole() -> OffPolicyPreset:
    """DQN on CartPole-v1: double DQN, hard target copies, epsilon 1 -> 0.05 over 10k frames."""
    return OffPolicyPreset(
        name="dqn-cartpole",
        algo_name="dqn",
        learner_builder=dqn_learner,
        algo=OffPolicyConfig(
            env_id="CartPole-v1", num_envs=8, hidden_sizes=(64, 64), lr=1e-3, batch_size=128,
            buffer_size=50_000, target_update="hard", hard_update_interval=100,
            exploration_frames=10_000, max_grad_norm=10.0,
        ),
        scheme=SchemeConfig(
            num_collectors=2, frames_per_batch=256, utd_ratio=0.25, init_random_frames=1000
        ),
        trainer=TrainerConfig(
            total_frames=100_000, eval_every_frames=10_000, eval_episodes=10, target_return=475.0
        ),
    )  # fmt: skip


def apex_dqn_cartpole() -> OffPolicyPreset:
    """Ape-X DQN on CartPole-v1, scaled to 2 cores: dqn-cartpole's learner and workers with Ape-X's replay.

    Two prioritized replay shards (actors) that the two workers write into with the
    one-step TD errors they compute with their own copy of the network (Horgan et al.
    2018; alpha 0.6, beta 0.4), 3-step returns computed in each worker, a dueling
    double-DQN head, and a fixed epsilon per worker, ``0.4 ** (1 + 7 i / (N - 1))`` (0.4
    and 0.0007 for two workers).
    """
    return dqn_cartpole().derive(
        "apex-dqn-cartpole", prioritized=True, replay_shards=2, n_steps=3, dueling=True,
        worker_eps=0.4, buffer_location="ray",
    )  # fmt: skip


def sac_pendulum() -> OffPolicyPreset:
    """SAC on Pendulum-v1: two Q-networks, learned temperature, one gradient step per frame.

    dqn-cartpole's workers on Pendulum, with soft target updates: minibatches of 64 at
    lr 3e-3 reach -200 in a third of the wall time of 256 at 1e-3 (benchmarks/results/
    offpolicy.md, stop 20); one gradient step per frame (the RL Zoo's ratio) gets there in
    6,144 agent steps (median of 5 seeds, as SB3's SAC) where one per 4 frames took 14,336,
    in 1.7x the wall time (benchmarks/results/learning.md).
    """
    return dqn_cartpole().derive(
        "sac-pendulum", algo_name="sac", learner_builder=sac_learner, utd_ratio=1.0,
        env_id="Pendulum-v1", num_envs=4, lr=3e-3, batch_size=64, buffer_size=100_000,
        target_update="soft", hard_update_interval=500, max_grad_norm=None,
        total_frames=50_000, eval_every_frames=2_048, target_return=-200.0,
    )  # fmt: skip


def td3_pendulum() -> OffPolicyPreset:
    """TD3 on Pendulum-v1: target policy smoothing, Gaussian exploration noise (sigma 0.1)."""
    return sac_pendulum().derive("td3-pendulum", algo_name="td3", learner_builder=td3_learner)


def sac_halfcheetah() -> OffPolicyPreset:
    """SAC on MuJoCo's HalfCheetah-v5 (``pip install -e ".[mujoco]"``).

    torchrl's SAC settings (256x256 networks, batch 256, 10k random frames first,
    one gradient step per frame); one collector of 4 envs in batches of 128 frames.
    At one gradient step per frame the learner is the bottleneck (an update costs
    hundreds of env steps), so more collectors only add batches in flight, each
    collected with older weights: with 4 collectors of 1024 frames the data was
    ~3.5 weight pushes (~3,600 updates) behind the learner, and at 100k agent steps
    the return was 29 % below SB3's (benchmarks/results/learning.md, stop 48).
    """
    return sac_pendulum().derive(
        "sac-halfcheetah",
        env_id="HalfCheetah-v5", eval_num_envs=5, hidden_sizes=(256, 256), lr=3e-4,
        batch_size=256, buffer_size=1_000_000,
        num_collectors=1, frames_per_batch=128, utd_ratio=1.0, init_random_frames=10_000,
        total_frames=1_000_000, eval_every_frames=50_000, eval_episodes=5, target_return=None,
    )  # fmt: skip
