"""Every gradient-worker mode trains CartPole above random in a short real run (slow)."""

from __future__ import annotations

import functools
import statistics
import time

import pytest

from tdscheme.gradient_workers import build_gradient_coordinator
from tdscheme.testing import cartpole_learner, cartpole_modules, make_env

from .helpers import new_learner, small_config

# A uniformly random policy averages ~22 on CartPole-v1.
ABOVE_RANDOM = 40.0
vector_cartpole = functools.partial(make_env, "CartPole-v1", num_envs=8)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "mode_options",
    [
        {"communication": "synchronous"},
        {"communication": "asynchronous"},
        {"communication": "synchronous", "decentralized": True},
    ],
    ids=["synchronous", "asynchronous", "decentralized"],
)
def test_trains_cartpole_above_random(ray_clean, mode_options):
    config = small_config(frames_per_batch=256, **mode_options)
    learner_factory = functools.partial(cartpole_learner, lr=3e-3)
    returns: list[float] = []
    rolling = 0.0
    with build_gradient_coordinator(
        config, env_factory=vector_cartpole, policy_factory=cartpole_modules,
        learner_factory=learner_factory, learner=new_learner(learner_factory),
    ) as coordinator:  # fmt: skip
        coordinator.step()  # the first step includes starting the actors
        deadline = time.monotonic() + 180.0
        for _ in range(300):
            metrics = coordinator.step()
            if "episode_return_mean" in metrics:
                returns.append(metrics["episode_return_mean"])
            if len(returns) >= 5:
                rolling = max(rolling, statistics.fmean(returns[-5:]))
            if rolling > 1.5 * ABOVE_RANDOM or time.monotonic() > deadline:
                break
        frames = coordinator.stats()["frames"]
    assert rolling > ABOVE_RANDOM, f"best 5-step mean return {rolling:.1f} after {frames} frames"
