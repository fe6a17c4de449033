"""Scheme: collect -> learn -> push on a real Ray, real CartPole envs and a real ClipPPOLoss."""

from __future__ import annotations

import math
import os
import signal
import time

import pytest
import ray
import torch

from tdscheme import Scheme, SchemeConfig
from tdscheme.presets import get_preset

SMALL = {"num_cpus": 0.5}


def tiny_preset(**overrides):
    """ppo-cartpole with 4 envs per collector and small batches."""
    values = {"num_envs": 4, "frames_per_batch": 256, "minibatch_size": 128, "num_epochs": 2,
              "collector_resources": SMALL}  # fmt: skip
    return get_preset("ppo-cartpole").override({**values, **overrides})


def build(preset) -> Scheme:
    return Scheme(**preset.factories(), config=preset.scheme)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("num_collectors", 0),
        ("frames_per_batch", -1),
        ("weight_push_interval", 0),
        ("max_policy_lag", -1),
        ("sync", "yes"),
        ("grad_communication", "gossip"),
        ("num_grad_workers", -1),
        ("seed", 1.5),
        ("batch_timeout_s", 0),
    ],
)
def test_config_rejects_bad_values_naming_the_field(field, value):
    with pytest.raises(ValueError, match=rf"{field}={value!r} is invalid; accepted: "):
        SchemeConfig(**{field: value})


def test_config_cross_checks():
    with pytest.raises(ValueError, match="frames_per_batch=100 .* multiple of num_collectors"):
        SchemeConfig(num_collectors=3, frames_per_batch=100, sync=True)
    with pytest.raises(ValueError, match="preemption=.* sync=False"):
        SchemeConfig(preemption={"fraction_workers": 0.5, "fraction_samples": 0.5})


def test_decentralized_asynchronous_gradient_workers_are_rejected():
    # Gradient workers themselves run in tests/scheme/test_grad_worker_loop.py.
    with pytest.raises(ValueError, match="decentralized=True is invalid with grad_communication"):
        SchemeConfig(num_grad_workers=2, grad_communication="asynchronous", decentralized=True)


def test_factories_are_checked():
    factories = tiny_preset().factories()
    with pytest.raises(TypeError, match="env_factory=3 is not callable"):
        Scheme(**{**factories, "env_factory": 3})
    with pytest.raises(ValueError, match="'actor' key"):
        Scheme(**{**factories, "policy_factory": lambda: {"critic": torch.nn.Linear(4, 1)}})


def assert_finite(metrics: dict[str, float]) -> None:
    for key, value in metrics.items():
        assert isinstance(value, float) and math.isfinite(value), (key, value)


def test_steps_train_push_every_k_updates_and_state_restores(ray_clean):
    preset = tiny_preset(sync=True, num_collectors=2, frames_per_batch=256, weight_push_interval=2)
    with build(preset) as scheme:
        history = [scheme.step() for _ in range(4)]
        assert history[-1]["policy_lag/max"] == 0  # the preset is strictly on-policy
        assert scheme.learner.version == 4
        assert scheme.collector.policy_version == 2  # pushed after updates 2 and 4
        assert scheme.collector.wait_for_weights(timeout_s=60) == [2, 2]

        state = scheme.state_dict()
        before = scheme.learner.weights()
        torch.nn.init.zeros_(next(scheme.learner.loss_module.parameters()))
        scheme.load_state_dict(state)  # restores the learner and pushes its weights
        after = scheme.learner.weights()
        assert all(torch.equal(before.get(k), after.get(k)) for k in before.keys(True, True))
        assert scheme.frames == 1024 and scheme.collector.collected_frames == 1024
        assert scheme.collector.wait_for_weights(timeout_s=60) == [3, 3]
        # A budget of 100 more frames: the stacked [2 workers, 4 envs, T] batch is cut at
        # whole steps of 8 frames (96, never over), then iteration ends and step() says why.
        scheme.set_total_frames(1124)
        assert [m["frames"] for m in scheme] == [1120.0] and scheme.frames_left == 0
        with pytest.raises(RuntimeError, match="budget of set_total_frames is spent at 1120"):
            scheme.step()
        ledger = scheme.collector.stats()["ledger"]
        assert ledger["yielded"] == 1120 and ledger["unaccounted"] == 0, ledger
        assert ledger["balanced"] and ledger["in_flight"] == 0, ledger
    scheme.shutdown()  # idempotent
    assert [m["frames"] for m in history] == [256.0, 512.0, 768.0, 1024.0]
    last = history[-1]
    assert_finite(last)
    for key in ("fps", "learner/loss_objective", "learner/loss_critic", "learner/grad_norm",
                "learner/lr", "policy_lag/mean", "collector/wait_ms", "collector/frames",
                "time/learn_s", "train/episode_return", "train/episode_length"):  # fmt: skip
        assert key in last, key
    assert 8 <= last["train/episode_return"] <= 500
    assert last["collector/frames"] == 1024.0
    with pytest.raises(RuntimeError, match="shut down"):
        scheme.step()


def test_a_step_never_waits_on_a_ping_of_every_worker(ray_clean, monkeypatch):
    """The per-step counters send their pings and read the answers at a later call: every
    wait on a ping is ``timeout_s=0``; a frozen worker is counted out once its round settles."""
    from tdscheme.collectors.driver.pool import WorkerPool

    pings, ping_refs, waits = [], set(), []
    answering, submit, wait = WorkerPool.answering, WorkerPool.submit, WorkerPool.wait

    def counted(self, timeout_s):
        pings.append(timeout_s)
        return answering(self, timeout_s)

    def submitted(self, worker_id, method, *args):
        ref = submit(self, worker_id, method, *args)
        if method == "ping":
            ping_refs.add(ref)
        return ref

    def waited(self, refs, *, num_returns=1, timeout_s):
        if ping_refs & set(refs):
            waits.append(timeout_s)
        return wait(self, refs, num_returns=num_returns, timeout_s=timeout_s)

    monkeypatch.setattr(WorkerPool, "answering", counted)
    monkeypatch.setattr(WorkerPool, "submit", submitted)
    monkeypatch.setattr(WorkerPool, "wait", waited)
    with build(tiny_preset(num_collectors=2)) as scheme:
        metrics = [scheme.step() for _ in range(3)]
        assert pings == []  # the counters are the driver's own
        assert all(m["collector/workers_alive"] == 2.0 for m in metrics)
        assert scheme.collector.stats(timeout=10.0)["workers_alive"] == 2 and pings == [10.0]
        waits = [w for w in waits if w != 10.0]  # stats() is the call that may wait
        collector = scheme.collector
        pid = ray.get(collector.workers[1].__ray_call__.remote(lambda _: os.getpid()), timeout=30)
        os.kill(pid, signal.SIGSTOP)  # answers no ping
        try:
            assert collector.counters(alive_max_age_s=0.0)["workers_alive"] == 2  # round sent
            deadline = time.monotonic() + 30
            while collector.counters(alive_max_age_s=3600)["workers_alive"] != 1:
                assert time.monotonic() < deadline, "the ping round never settled"
                time.sleep(0.05)
        finally:
            os.kill(pid, signal.SIGCONT)
        assert collector.counters(alive_max_age_s=0.0)["workers_alive"] == 1  # next round sent
        deadline = time.monotonic() + 30
        while collector.counters(alive_max_age_s=3600)["workers_alive"] != 2:
            assert time.monotonic() < deadline, "the thawed worker was not counted again"
            time.sleep(0.05)
    assert pings == [10.0] and waits and set(waits) == {0}  # never a blocking wait on a ping
