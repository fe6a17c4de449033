"""Configuration errors before any actor starts: each names the argument, its value and what is accepted."""

from __future__ import annotations

import functools
import logging
import math

import pytest
import torch
from tensordict.nn import TensorDictModule

from tdscheme import RayCollector, RayCollectorConfig, SchemeConfig
from tdscheme.collectors import CollectorWorker, WorkerSpec
from tdscheme.engine import TrainerConfig
from tdscheme.errors import WorkerError
from tdscheme.presets import ActorCriticConfig
from tdscheme.testing import bias_policy, make_env

PENDULUM = functools.partial(make_env, "Pendulum-v1")


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("split_trajs", "yes", "split_trajs='yes' is invalid; accepted: True or False"),
        ("sync", 1, "sync=1 is invalid; accepted: True or False"),
        ("update_after_each_batch", "x", "update_after_each_batch='x' is invalid"),
        ("seed", 1.5, "seed=1.5 is invalid; accepted: None or an int >= 0"),
        ("max_frames_per_traj", 1.5, "max_frames_per_traj=1.5 is invalid"),
        ("init_random_frames", -5, "init_random_frames=-5 is invalid"),
        ("ray_init_config", 3, "ray_init_config=3 is invalid"),
        ("ray_init_config", {"num_cpu": 2}, "ray_init_config['num_cpu']=2 is invalid"),
        ("remote_configs", {"num_cpu": 1}, "remote_configs={'num_cpu': 1} is invalid; accepted: Ray actor options"),
        ("remote_configs", {"num_cpus": -1}, "cannot be negative"),
        ("remote_configs", 3, "remote_configs=3 is invalid"),
        ("collector_kwargs", 3, "collector_kwargs=3 is invalid"),
    ],
)  # fmt: skip
def test_ray_collector_config(field, value, expected):
    with pytest.raises(ValueError) as info:
        RayCollectorConfig(PENDULUM, bias_policy(3, 1), frames_per_batch=10, **{field: value})
    assert expected in str(info.value)


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (lambda: SchemeConfig(collector_resources={"num_gpu": 1}), "collector_resources={'num_gpu': 1} is invalid"),
        (lambda: SchemeConfig(collector_resources=[{"num_cpus": 1}, {"num_cpus": "a"}]), "collector_resources[1]="),
        (lambda: SchemeConfig(grad_worker_resources={"num_cpus": -2}), "grad_worker_resources="),
        (lambda: SchemeConfig(ray_init_config={"num_cpu": 2}), "ray_init_config['num_cpu']=2 is invalid"),
        (lambda: TrainerConfig(target_return=math.nan), "target_return=nan is invalid"),
        (lambda: TrainerConfig(exp_name=""), "exp_name='' is invalid"),
        (lambda: ActorCriticConfig(env_id="Pendulm-v1"), "did you mean 'Pendulum-v1'"),
    ],
)  # fmt: skip
def test_other_configs(build, expected):
    with pytest.raises(ValueError) as info:
        build()
    assert expected in str(info.value)


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (bias_policy(3, 1, obs_key="obs"), "in_keys ['obs'] that the env does not provide (missing ['obs']; the env provides ['done', 'observation'"),
        (TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["act"]), "out_keys ['act'] that miss the env's action key(s) ['action'] (extra: ['act'])"),
    ],
)  # fmt: skip
def test_policy_keys_are_checked_when_the_worker_starts(policy, expected):
    with pytest.raises(ValueError) as info:
        CollectorWorker(0, WorkerSpec(PENDULUM, policy, frames_per_batch=10))
    assert expected in str(info.value)


def test_a_policy_that_does_not_fit_the_env_fails_the_construction_on_the_driver(ray_clean, caplog):
    # The mistake is the same after every restart: one clean error naming it, no restart.
    with caplog.at_level(logging.WARNING, logger="tdscheme"):
        with pytest.raises(WorkerError) as info:
            RayCollector(
                PENDULUM, bias_policy(3, 1, obs_key="obs"), frames_per_batch=20,
                num_collectors=1, remote_configs={"num_cpus": 0.5}, max_restarts=3,
            )  # fmt: skip
    first_line = str(info.value).splitlines()[0]
    assert first_line.startswith("collector worker 0: failed while starting: ValueError: ")
    assert "in_keys ['obs'] that the env does not provide" in first_line
    assert not [r for r in caplog.records if "restarting" in r.getMessage()]
