"""Small configs and learners shared by the gradient worker tests."""

from __future__ import annotations

import functools

from tdscheme.gradient_workers import (
    GradientCoordinator,
    GradientWorkersConfig,
    build_gradient_coordinator,
)
from tdscheme.testing import cartpole_learner, cartpole_modules, make_env

SMALL = {"num_cpus": 0.5}
cartpole = functools.partial(make_env, "CartPole-v1")


def small_config(**overrides) -> GradientWorkersConfig:
    """Two workers, 64 frames per gradient, half a CPU each, seeded, 120 s timeout."""
    kwargs = dict(
        num_grad_workers=2, frames_per_batch=64, worker_resources=SMALL, seed=0, timeout_s=120.0
    )
    kwargs.update(overrides)
    return GradientWorkersConfig(**kwargs)


def new_learner(learner_factory=cartpole_learner):
    return learner_factory(**cartpole_modules())


def cartpole_coordinator(**overrides) -> GradientCoordinator:
    """A coordinator of ``small_config(**overrides)`` training the CartPole learner."""
    return build_gradient_coordinator(
        small_config(**overrides),
        env_factory=cartpole,
        policy_factory=cartpole_modules,
        learner_factory=cartpole_learner,
        learner=new_learner(),
    )
