"""Scheme.set_env_config in every way of training: the asynchronous learner, a Ray-held replay
buffer the workers write into in the background, and gradient workers.

The envs are CartPole copies whose attributes take env configs (``EnvAttributes``); the
config shortens the pole (``length``), and the frames' ``("collector",
"env_config_version")`` says which copies run it.
"""

from __future__ import annotations

import functools
import time

import pytest
import torch

from tdscheme.envs.env_config import make_configurable_env
from tdscheme.gradient_workers import GradientWorker, GradientWorkerSpec
from tdscheme.keys import ENV_CONFIG_VERSION_KEY
from tdscheme.presets import get_preset
from tdscheme.rollout.env_config import EnvConfigPush
from tdscheme.transport import TensorDictCodec

pytestmark = pytest.mark.timeout(300)

SHORT = {"length": 0.25}
SMALL = {"num_cpus": 0.5}


def configurable(name: str, **overrides):
    """A preset whose training env copies take env configs (any curriculum makes them so)."""
    return get_preset(name).derive(
        f"{name}-configurable", curriculum=functools.partial(dict), **overrides
    )


def step_until_version(scheme, version: int, *, timeout_s: float = 120.0) -> dict:
    """Steps until an episode that ran ``version`` ends; returns that step's metrics."""
    deadline = time.monotonic() + timeout_s
    while True:
        metrics = scheme.step()
        episodes = scheme.last_episodes
        if episodes is not None and episodes.versions and version in episodes.versions:
            return metrics
        assert time.monotonic() < deadline, f"no episode of version {version} ended"


def test_the_asynchronous_learner_trains_on_a_pushed_config(ray_clean):
    preset = configurable(
        "impala-cartpole", num_collectors=2, num_envs=4, frames_per_batch=256,
        collector_resources=SMALL,
    )  # fmt: skip
    with preset.build_scheme() as scheme:
        scheme.step()
        version = scheme.set_env_config(SHORT)
        assert version == 1
        assert scheme.wait_for_env_config(version, timeout_s=60) == [1, 1]
        step_until_version(scheme, version)
        stats = scheme.collector.stats()
        assert stats["env_config_version"] == 1 and stats["ledger"]["balanced"]
        # the scheme's state holds it: a resumed run goes on with the same config
        state = scheme.state_dict()
        assert state["collector"][0]["tdscheme"]["env_config"]["config"] == SHORT


def test_workers_writing_into_a_ray_held_buffer_stamp_what_they_write(ray_clean):
    preset = configurable(
        "dqn-cartpole", num_collectors=2, num_envs=2, frames_per_batch=64,
        buffer_location="ray", init_random_frames=64, collector_resources=SMALL,
    )  # fmt: skip
    with preset.build_scheme() as scheme:
        scheme.step()
        for _ in range(5):  # the background thread reads acknowledgements as the driver waits
            version = scheme.set_env_config(SHORT, apply="now")
            assert scheme.wait_for_env_config(version, timeout_s=60) == [version, version]
        step_until_version(scheme, version)
        with scheme.paused():
            stored = scheme.replay_buffer[:]
        assert version in stored[ENV_CONFIG_VERSION_KEY]


def test_gradient_workers_take_configs_and_rebuild_with_them(ray_clean):
    preset = configurable(
        "a3c-cartpole", num_envs=4, frames_per_batch=128, grad_worker_resources=SMALL
    )
    with preset.build_scheme() as scheme:
        scheme.step()
        version = scheme.set_env_config(SHORT, worker_ids=[1])  # acknowledged before it returns
        assert scheme.wait_for_env_config(version) == [0, 1]
        scheme.step()
        state = scheme.state_dict()["grad_workers"]["env_config"]
        assert state == {
            "version": 1,
            "workers": {1: {"config": SHORT, "version": 1, "apply_env_config": None}},
        }
        coordinator = scheme.coordinator
        assert coordinator.env_configs.start_kwargs(1)  # a rebuilt worker 1 starts with it
        assert coordinator.env_configs.start_kwargs(0) == {}


def test_a_gradient_worker_applies_configs_to_every_copy_of_its_collectors():
    preset = get_preset("ppo-cartpole")
    spec = GradientWorkerSpec(
        functools.partial(make_configurable_env, "CartPole-v1", num_envs=2),
        preset.policy_factory(), preset.learner_factory(), frames_per_batch=40,
        num_collectors=2,
    )  # fmt: skip
    worker = GradientWorker(0, spec, seed=0)
    try:
        assert worker.set_env_config(EnvConfigPush(SHORT, version=3, apply="now")) == 3
        worker.compute_gradients()
        batch = TensorDictCodec().decode(worker.last_batch())
        assert (batch[ENV_CONFIG_VERSION_KEY] == 3).all()
        for rollout in worker._collection._rollouts:
            copies = rollout.collector.env._env.envs
            assert [copy.unwrapped.length for copy in copies] == [0.25, 0.25]
        with pytest.raises(ValueError, match="version 2 is not newer than version 3"):
            worker.set_env_config(EnvConfigPush(SHORT, version=2))
    finally:
        worker.shutdown()
    assert torch.get_num_threads() >= 1
