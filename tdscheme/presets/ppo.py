"""PPO presets: ClipPPOLoss + GAE on CartPole and Pendulum.

Example:
    >>> preset = ppo_cartpole()
    >>> preset.name, preset.scheme.num_collectors
    ('ppo-cartpole', 2)
    >>> learner = preset.learner_factory()(**preset.policy_factory()())
    >>> type(learner.loss_module).__name__
    'ClipPPOLoss'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tdscheme.presets.preset import Preset
from tdscheme.presets.settings import ActorCriticConfig

if TYPE_CHECKING:
    from torch import nn

    from tdscheme.learner import Learner

__all__ = ["ppo_cartpole", "ppo_learner", "ppo_mountaincar", "ppo_pendulum"]


def ppo_learner(
    *, config: ActorCriticConfig, total_updates: int | None = None, **modules: nn.Module
) -> Learner:
    """A Learner over torchrl's ``ClipPPOLoss`` with ``config.advantage`` (GAE; V-trace: APPO).

    The arguments are those of
    :func:`~tdscheme.presets.actor_critic.actor_critic_loss_learner` (the actor built
    with ``return_log_prob=True``); PPO adds ``config.clip_epsilon`` and
    ``config.normalize_advantage`` to the loss.

    Returns:
        The Learner.
    """
    from torchrl.objectives import ClipPPOLoss

    from tdscheme.presets.actor_critic import actor_critic_loss_learner

    return actor_critic_loss_learner(
        ClipPPOLoss, config=config, total_updates=total_updates, **modules,
        clip_epsilon=config.clip_epsilon, normalize_advantage=config.normalize_advantage,
    )  # fmt: skip


def ppo_cartpole() -> Preset:
    """PPO on CartPole-v1, tuned to reach an evaluation return of 475 fast on 2 CPUs.

    a2c-cartpole's envs, workers and evaluation with PPO's loss: two collectors step
    32 envs each; every learner update trains 10 epochs of 512-frame minibatches on
    2048 fresh, strictly on-policy frames (the workers wait for the new weights), and
    the run stops at the first evaluation whose mean return over 10 episodes reaches
    475. An evaluation (10 episodes at once) costs about as much as two updates, hence
    one every 8192 frames; with ``lr=3e-3`` the run reaches 475 at 16k-33k frames
    depending on the seed.
    """
    from tdscheme.presets.a2c import a2c_cartpole

    return a2c_cartpole().derive(
        "ppo-cartpole", learner_builder=ppo_learner,
        num_envs=32, lr=3e-3, anneal_frames=50_000, lr_end_factor=0.1, num_epochs=10,
        minibatch_size=512, entropy_coef=0.0, normalize_advantage=True,
        frames_per_batch=2048, sync=True, max_policy_lag=0,
        total_frames=100_000, eval_every_frames=8192,
    )  # fmt: skip


def ppo_pendulum() -> Preset:
    """PPO on Pendulum-v1 (continuous actions): from about -1200 to better than -400.

    ppo-cartpole's workers and on-policy batches on Pendulum's settings (gamma 0.9,
    rewards scaled by 0.1, 4096-frame batches).
    """
    return ppo_cartpole().derive(
        "ppo-pendulum",
        env_id="Pendulum-v1", num_envs=16, gamma=0.9, lr=1e-3, anneal_frames=None,
        lr_end_factor=0.0, reward_scale=0.1, frames_per_batch=4096,
        total_frames=400_000, eval_every_frames=32_768, target_return=-200.0,
    )  # fmt: skip


def ppo_mountaincar() -> Preset:
    """PPO on MountainCar-v0 (a reward of -1 per step until the flag, 200 steps at most).

    ppo-pendulum's workers and batches with a long horizon (gamma 0.99) and an entropy
    bonus. Plain PPO rarely learns it: a random policy almost never reaches the flag, so
    every episode scores -200 and there is nothing to learn from (the gymnasium threshold is
    -110); ``ppo-mountaincar-curriculum`` is the same preset with a curriculum that does.
    """
    return ppo_pendulum().derive(
        "ppo-mountaincar",
        env_id="MountainCar-v0", gamma=0.99, reward_scale=1.0, entropy_coef=0.01,
        total_frames=400_000, eval_every_frames=50_000, target_return=-110.0,
    )  # fmt: skip
