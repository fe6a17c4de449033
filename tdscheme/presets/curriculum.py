"""Curriculum presets: the env made harder as the agent improves, evaluated at the hardest level.

``ppo-mountaincar-curriculum`` is ``ppo-mountaincar`` whose training cars start with an engine
ten times MountainCar's (``force`` 0.01: random driving reaches the flag) and move to a weaker
one each time the mean return at the current one reaches ``MOUNTAINCAR_PROMOTE_AT``, down to
MountainCar-v0's own 0.001, where the car has to rock back and forth to climb; it is evaluated on
MountainCar-v0 as registered throughout. Without the curriculum, PPO never sees the flag
(every episode ends at 200 steps, return -200) and learns nothing within the same budget.

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
    >>> ppo_mountaincar_curriculum().curriculum().levels[0]
    {'force': 0.01}
    >>> preset = ppo_pendulum_curriculum()
    >>> preset.name, preset.algo.env_id, preset.curriculum().levels[0]
    ('ppo-pendulum-curriculum', 'Pendulum-v1', {'g': 2.0})
"""

from __future__ import annotations

from tdscheme.engine.curriculum import ThresholdCurriculum
from tdscheme.presets.ppo import ppo_mountaincar, ppo_pendulum
from tdscheme.presets.preset import Preset

__all__ = [
    "ENGINE_FORCES",
    "GRAVITIES",
    "MOUNTAINCAR_PROMOTE_AT",
    "PROMOTE_AT",
    "mountaincar_force_curriculum",
    "pendulum_gravity_curriculum",
    "ppo_mountaincar_curriculum",
    "ppo_pendulum_curriculum",
]

#: MountainCar's engine force per level, strongest first; MountainCar-v0's own is 0.001.
ENGINE_FORCES = (0.01, 0.005, 0.003, 0.002, 0.0015, 0.00125, 0.001)
#: The mean return (over ``MIN_EPISODES`` episodes at the current force) that promotes.
MOUNTAINCAR_PROMOTE_AT = -150.0

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


def mountaincar_force_curriculum() -> ThresholdCurriculum:
    """Engine force ``ENGINE_FORCES[0]`` first, the next once the mean return reaches -150."""
    return ThresholdCurriculum(
        [{"force": force} for force in ENGINE_FORCES],
        promote_at=MOUNTAINCAR_PROMOTE_AT, min_episodes=MIN_EPISODES,
    )  # fmt: skip


def ppo_mountaincar_curriculum() -> Preset:
    """``ppo-mountaincar`` trained under :func:`mountaincar_force_curriculum`."""
    return ppo_mountaincar().derive(
        "ppo-mountaincar-curriculum", curriculum=mountaincar_force_curriculum
    )
