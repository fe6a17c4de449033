"""GradientWorkersConfig and build_gradient_coordinator argument checks (no Ray needed)."""

from __future__ import annotations

import pytest

from tdscheme.collectors import PreemptionConfig
from tdscheme.gradient_workers import GradientWorkersConfig, build_gradient_coordinator
from tdscheme.testing import cartpole_learner, cartpole_modules, make_env


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_grad_workers": 0}, "num_grad_workers=0 is invalid; accepted: an int >= 1"),
        (
            {"communication": "sync"},
            "communication='sync' is invalid; accepted: 'synchronous', 'asynchronous'",
        ),
        (
            {"frames_per_batch": 10, "num_collectors": 3},
            "frames_per_batch=10 is invalid with num_collectors=3; accepted: a multiple",
        ),
        ({"timeout_s": 0}, "timeout_s=0 is invalid; accepted: a finite number > 0"),
        (
            {"grads_per_step": 4},
            "grads_per_step=4 is invalid with communication='synchronous'; accepted: None, or communication='asynchronous'",
        ),
        (
            {"max_grad_staleness": 1},
            "max_grad_staleness=1 is invalid with communication='synchronous'",
        ),
        (
            {"communication": "asynchronous", "max_grad_staleness": -1},
            "max_grad_staleness=-1 is invalid; accepted: None or an int >= 0",
        ),
        (
            {"communication": "asynchronous", "decentralized": True},
            "decentralized=True is invalid with communication='asynchronous'; accepted: decentralized=False",
        ),
        (
            {
                "decentralized": True,
                "preemption": {"fraction_workers": 0.5, "fraction_samples": 0.5},
            },
            "preemption=.* is invalid with communication='synchronous', decentralized=True; accepted: None, or centralized",
        ),  # fmt: skip
        ({"preemption": {"fraction": 0.5}}, "unknown keys"),
    ],
)
def test_bad_values_name_the_argument(kwargs, message):
    with pytest.raises(ValueError, match=message):
        GradientWorkersConfig(**kwargs)


def test_worker_resources_must_be_a_dict():
    with pytest.raises(TypeError, match="worker_resources must be a dict"):
        GradientWorkersConfig(worker_resources=1)


def test_defaults_and_modes():
    cfg = GradientWorkersConfig(preemption={"fraction_workers": 0.5, "fraction_samples": 0.5})
    assert cfg.mode == "synchronous" and isinstance(cfg.preemption, PreemptionConfig)
    assert cfg.remote_options() == {"num_cpus": 1}
    assert cfg.remote_options() is not cfg.remote_options()  # fresh dict each call
    cfg = GradientWorkersConfig(num_grad_workers=3, communication="asynchronous")
    assert (cfg.mode, cfg.grads_per_step_or_default()) == ("asynchronous", 3)
    assert GradientWorkersConfig(decentralized=True).mode == "decentralized"


def test_build_rejects_bad_factories_before_starting_workers():
    learner = cartpole_learner(**cartpole_modules())
    config = GradientWorkersConfig(num_grad_workers=2)
    common = dict(policy_factory=cartpole_modules, learner_factory=cartpole_learner,
                  learner=learner)  # fmt: skip
    with pytest.raises(ValueError, match="list of 3 factories"):
        build_gradient_coordinator(config, env_factory=[make_env] * 3, **common)
    with pytest.raises(TypeError, match=r"env_factory\[1\] must be callable"):
        build_gradient_coordinator(config, env_factory=[make_env, "CartPole-v1"], **common)
    with pytest.raises(TypeError, match="config must be a GradientWorkersConfig"):
        build_gradient_coordinator({"num_grad_workers": 2}, env_factory=make_env, **common)
