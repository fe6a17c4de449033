"""A2C preset: torchrl's A2CLoss + GAE on CartPole.

Example:
    >>> preset = a2c_cartpole()
    >>> learner = preset.learner_factory()(**preset.policy_factory()())
    >>> type(learner.loss_module).__name__, learner.config.num_epochs
    ('A2CLoss', 1)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tdscheme.engine.trainer_config import TrainerConfig
from tdscheme.presets.preset import Preset
from tdscheme.presets.settings import ActorCriticConfig
from tdscheme.scheme.config import SchemeConfig

if TYPE_CHECKING:
    from torch import nn

    from tdscheme.learner import Learner

__all__ = ["a2c_cartpole", "a2c_learner"]


def a2c_learner(
    *, config: ActorCriticConfig, total_updates: int | None = None, **modules: nn.Module
) -> Learner:
    """A Learner over torchrl's ``A2CLoss`` with ``config.advantage`` (GAE; V-trace for IMPALA).

    The arguments are those of
    :func:`~tdscheme.presets.actor_critic.actor_critic_loss_learner`; A2C uses neither
    ``config.clip_epsilon`` nor ``config.normalize_advantage``.

    Returns:
        The Learner.
    """
    from torchrl.objectives import A2CLoss

    from tdscheme.presets.actor_critic import actor_critic_loss_learner

    return actor_critic_loss_learner(A2CLoss, config=config, total_updates=total_updates, **modules)


def a2c_cartpole() -> Preset:
    """A2C on CartPole-v1: one gradient step per batch of 16 envs x 32 steps.

    The root of the CartPole actor-critic presets (ppo-cartpole, impala-cartpole,
    a3c-cartpole derive from it).
    """
    return Preset(
        name="a2c-cartpole",
        learner_builder=a2c_learner,
        algo=ActorCriticConfig(
            env_id="CartPole-v1", num_envs=16, lr=1e-3, num_epochs=1, minibatch_size=None,
            entropy_coef=0.01, normalize_advantage=False,
        ),
        scheme=SchemeConfig(num_collectors=2, frames_per_batch=512),
        trainer=TrainerConfig(
            total_frames=300_000, eval_every_frames=20_480, eval_episodes=10, target_return=475.0
        ),
    )  # fmt: skip
