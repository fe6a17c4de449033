"""A curriculum preset: PPO on Pendulum with gravity ramped up as the agent improves.

``ppo-pendulum-curriculum`` is ``ppo-pendulum`` whose training envs start at a low gravity
(the pendulum is then lifted straight up, no swing needed) and move to the next
gravity once the mean return at the current one reaches ``PROMOTE_AT``, up to
Pendulum's own ``g = 10``; it is evaluated on ``g = 10`` throughout (the eval env is
the env as built). Each level is an env config (``{"g": ...}``) pushed to the
collector workers, versioned and recorded on every frame
(:mod:`tdscheme.collectors.driver.env_config`); the Trainer's
:class:`~tdscheme.engine.curriculum.ThresholdCurriculum` decides (and is checkpointed).
``benchmarks/env_config.py --learning`` compares it with ``ppo-pendulum`` on the same
frame budget.

Example:
    >>> preset = ppo_pendulum_curriculum()
    >>> preset.name, preset.algo.env_id, preset.curriculum().levels[0]
    ('ppo-pendulum-curriculum', 'Pendulum-v1', {'g': 2.0})
"""

from __future__ import annotations

from tdscheme.engine.curriculum import ThresholdCurriculum
from tdscheme.presets.ppo import ppo_pendulum
from tdscheme.presets.preset import Preset

__all__ = ["GRAVITIES", "PROMOTE_AT", "pendulum_gravity_curriculum", "ppo_pendulum_curriculum"]

#: The gravities, easiest first; Pendulum's own is 10.
GRAVITIES = (2.0, 4.0, 6.0, 8.0, 10.0)
#: The mean return (over ``MIN_EPISODES`` episodes at the current gravity) that promotes.
PROMOTE_AT = -400.0
MIN_EPISODES = 32


def pendulum_gravity_curriculum() -> ThresholdCurriculum:
    """Gravity ``GRAVITIES[0]`` first, the next once the mean return reaches ``PROMOTE_AT``."""
    return ThresholdCurriculum(
        [{"g": g} for g in GRAVITIES], promote_at=PROMOTE_AT, min_episodes=MIN_EPISODES
    )


def ppo_pendulum_curriculum() -> Preset:
    """``ppo-pendulum`` trained under :func:`pendulum_gravity_curriculum`, evaluated at ``g = 10``."""
    return ppo_pendulum().derive("ppo-pendulum-curriculum", curriculum=pendulum_gravity_curriculum)
