"""Gradient workers roll a refused env config back, as collector workers do (issue 64, point 5).

A push the workers refuse leaves what they ran: the config a rebuilt worker starts with,
``acked_versions()`` and the checkpoint are those of the last push they took.
"""

from __future__ import annotations

import functools

import pytest

from tdscheme.envs.env_config import make_configurable_env
from tdscheme.errors import GradientWorkerError
from tdscheme.gradient_workers import build_gradient_coordinator
from tdscheme.testing import cartpole_learner, cartpole_modules

from .helpers import cartpole, new_learner, small_config

pytestmark = pytest.mark.timeout(300)

SHORT = {"length": 0.25}


def coordinator_over(env_factory):
    return build_gradient_coordinator(
        small_config(), env_factory=env_factory, policy_factory=cartpole_modules,
        learner_factory=cartpole_learner, learner=new_learner(),
    )  # fmt: skip


def test_a_refused_push_leaves_the_last_config_taken(ray_clean):
    configurable = functools.partial(make_configurable_env, "CartPole-v1")
    with coordinator_over(configurable) as coordinator:
        assert coordinator.set_env_config(SHORT, worker_ids=[1]) == 1
        with pytest.raises(
            GradientWorkerError, match=r"gradient worker 0: refused env config version 2 \(workers "
            r"\[1\] too\): .*CartPoleEnv has no attribute 'size'",
        ):  # fmt: skip
            coordinator.set_env_config({"size": 2.0})  # acknowledged before
        assert coordinator.env_configs.acked_versions() == [0, 1]
        state = coordinator.state_dict()["env_config"]
        assert state == {
            "version": 2,  # versions only go forward: the next push is 3
            "workers": {1: {"config": SHORT, "version": 1, "apply_env_config": None}},
        }
        assert coordinator.env_configs.start_kwargs(0) == {}  # a rebuilt worker 0: as built
        assert coordinator.env_configs.start_kwargs(1)  # ... worker 1: version 1
        coordinator.step()  # and both go on computing gradients
        assert coordinator.set_env_config(SHORT) == 3
        assert coordinator.env_configs.acked_versions() == [3, 3]


def test_a_push_to_envs_without_the_protocol_is_kept_by_none(ray_clean):
    with coordinator_over(cartpole) as coordinator:
        with pytest.raises(GradientWorkerError, match="offers no way to receive an env config"):
            coordinator.set_env_config(SHORT)
        assert coordinator.env_configs.acked_versions() == [0, 0]  # [1, 1] before
        assert coordinator.state_dict()["env_config"]["workers"] == {}
        assert coordinator.env_configs.start_kwargs(0) == {}
