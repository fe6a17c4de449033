"""AsyncLoop (IMPALA / APPO): V-trace wiring, the lag bound, backpressure, the presets.

Real parts: a real CollectorWorker (in-process) for the wiring, a real Ray with
CartPole workers for the driver, torchrl's VTrace, A2CLoss and ClipPPOLoss.
"""

from __future__ import annotations

import copy
import functools
import time

import pytest
import torch
from torchrl.objectives.value import VTrace
from torchrl.objectives.value.functional import vtrace_advantage_estimate

from tdscheme import Scheme, SchemeConfig
from tdscheme.collectors import CollectorWorker, WorkerSpec
from tdscheme.keys import POLICY_VERSION_KEY
from tdscheme.learner.batches import prepare_batch
from tdscheme.presets import get_preset
from tdscheme.presets.actor_critic import train_env
from tdscheme.scheme.async_loop import AsyncLoop
from tdscheme.transport import TensorDictCodec

SMALL = {"num_cpus": 0.5}


def tiny(name: str = "impala-cartpole", **overrides):
    """The preset with 4 envs per collector and 64-frame batches."""
    values = {"num_envs": 4, "frames_per_batch": 64, "collector_resources": SMALL}
    if name.startswith("appo"):
        values["minibatch_size"] = 32
    return get_preset(name).override({**values, **overrides})


def collect(policy, *, seed: int) -> torch.Tensor:
    """One 4-env x 16-step batch from a real in-process worker running ``policy``."""
    env_fn = functools.partial(train_env, "CartPole-v1", num_envs=4)
    worker = CollectorWorker(0, WorkerSpec(env_fn, policy, frames_per_batch=64), seed=seed)
    try:
        return TensorDictCodec().decode(worker.collect(0).payload)
    finally:
        worker.shutdown()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("sync", True, "sync=True is invalid with async_learner=True"),
        ("max_policy_lag", 0, "max_policy_lag=0 is invalid with async_learner=True"),
        ("prefetch_batches", 0, "prefetch_batches=0 is invalid with async_learner=True"),
        ("num_grad_workers", 2, "num_grad_workers=2 is invalid with async_learner=True"),
    ],
)
def test_settings_that_defeat_the_async_learner_are_named(field, value, message):
    with pytest.raises(ValueError, match=message):
        SchemeConfig(async_learner=True, **{field: value})


def test_a_replay_buffer_is_refused():
    factories = tiny().factories()
    with pytest.raises(ValueError, match="storage_factory=.* is invalid with async_learner=True"):
        Scheme(**factories, config=tiny().scheme, storage_factory=lambda: None)


def test_vtrace_reads_the_behaviour_log_probs_the_worker_recorded():
    preset = tiny()
    modules = preset.policy_factory()()
    learner = preset.learner_factory()(**modules)
    behaviour = copy.deepcopy(learner.policy)  # the weights the worker collects with
    batch = collect(behaviour, seed=1)
    learner.update(collect(learner.policy, seed=2))  # the learner moves on: pi != mu
    assert batch.batch_size == (4, 16)

    # the worker recorded mu's log-prob of the action it took, where VTrace reads it
    key = learner.value_estimator.tensor_keys.sample_log_prob
    with torch.no_grad():
        dist = behaviour.get_dist(batch.select("observation").clone())
        recorded_mu = dist.log_prob(batch["action"])
    torch.testing.assert_close(batch[key], recorded_mu)

    prepared = prepare_batch(batch, value_estimator=learner.value_estimator)
    with torch.no_grad():  # V-trace by hand: torchrl's function on the same inputs
        log_pi = learner.policy.get_dist(batch.select("observation").clone())
        log_pi = log_pi.log_prob(batch["action"]).unsqueeze(-1)
        critic = modules["critic"]
        value = critic(batch.select("observation").clone())["state_value"]
        next_value = critic(batch["next"].select("observation").clone())["state_value"]
        assert not torch.allclose(log_pi, batch[key].unsqueeze(-1))
        adv, target = vtrace_advantage_estimate(
            torch.tensor(preset.algo.gamma), log_pi, batch[key].unsqueeze(-1), value,
            next_value, batch["next", "reward"], batch["next", "done"],
            batch["next", "terminated"], rho_thresh=torch.tensor(1.0),
            c_thresh=torch.tensor(1.0), time_dim=-2,
        )  # fmt: skip
    torch.testing.assert_close(prepared["advantage"], adv.flatten(0, 1))
    torch.testing.assert_close(prepared["value_target"], target.flatten(0, 1))
    assert (prepared[POLICY_VERSION_KEY] == 0).all()  # versions travel with the frames

    # torchrl's own VTrace scores a fresh sample of pi, not the action taken (see
    # tdscheme.learner.vtrace): when this fails, torchrl fixed it and the wrapper can go
    torch.manual_seed(0)
    plain = VTrace(gamma=preset.algo.gamma, actor_network=learner.policy, value_network=critic)
    assert not torch.allclose(plain(batch.clone())["advantage"], adv)


@pytest.mark.parametrize("name", ["impala-cartpole", "appo-cartpole"])
def test_the_presets_train_on_first_ready_batches(ray_clean, name):
    preset = tiny(name, weight_push_interval=2)
    with Scheme(**preset.factories(), config=preset.scheme) as scheme:
        assert isinstance(scheme.loop, AsyncLoop)
        steps = [scheme.step() for _ in range(6)]
        assert scheme.learner.version == 6
        assert scheme.collector.policy_version == 3  # a push every 2 updates
        for metrics in steps:
            hist = [v for k, v in metrics.items() if k.startswith("policy_lag/hist/")]
            assert len(hist) == 8 and sum(hist) == pytest.approx(1.0)
            assert metrics["policy_lag/min"] <= metrics["policy_lag/mean"]
            assert metrics["policy_lag/mean"] <= metrics["policy_lag/max"]
            assert metrics["learner/loss"] == metrics["learner/loss"]  # finite
        assert scheme.collector.stats()["ledger"]["balanced"]


def slow_learner_factory(preset, delay_s: float):
    """The preset's learner, each update made ``delay_s`` slower (a learner that lags)."""
    build = preset.learner_factory()

    def factory(**modules):
        learner = build(**modules)
        update = learner.update

        def slow_update(batch):
            time.sleep(delay_s)
            return update(batch)

        learner.update = slow_update
        return learner

    return factory


def test_a_slow_learner_holds_the_workers_and_stale_frames_are_dropped(ray_clean):
    preset = tiny(max_policy_lag=1, prefetch_batches=2)
    factories = {**preset.factories(), "learner_factory": slow_learner_factory(preset, 0.3)}
    with Scheme(**factories, config=preset.scheme) as scheme:
        steps = [scheme.step() for _ in range(8)]
        time.sleep(1.0)  # the workers had time to run ahead, if nothing held them
        ledger = scheme.collector.stats()["ledger"]
        # backpressure: beyond what was trained on, at most prefetch_batches per worker
        ahead = ledger["collected"] - 64 * 8 - ledger["dropped"]
        assert ahead <= 2 * 2 * 64, ledger
        # a batch two pushes old is over the bound: dropped and counted, never trained on
        assert ledger["dropped"] > 0 and ledger["balanced"], ledger
        assert max(m["policy_lag/max"] for m in steps) <= 1
        assert "policy_lag/hist/1+" in steps[-1]
