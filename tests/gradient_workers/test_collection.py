"""Gradient workers collect with LeanCollector by default: torchrl Collector's frames, exactly."""

from __future__ import annotations

import functools

import pytest
import torch

from tdscheme.envs import make_env
from tdscheme.gradient_workers import GradientWorker, GradientWorkersConfig, GradientWorkerSpec
from tdscheme.gradient_workers.collection import LocalCollection
from tdscheme.rollout.lean import LeanCollector
from tdscheme.rollout.torchrl_names import Collector
from tdscheme.testing import cartpole_learner, cartpole_modules
from tdscheme.transport import TensorDictCodec

# CartPole episodes end inside 40-step batches under a fresh actor, so the batches hold resets
CARTPOLE = functools.partial(make_env, "CartPole-v1", num_envs=4)


def assert_same_frames(want, got) -> None:
    """Same keys, batch size, dtypes and values (as tests/rollout/test_lean.py checks)."""
    assert sorted(got.keys(True, True), key=str) == sorted(want.keys(True, True), key=str)
    assert got.batch_size == want.batch_size
    for key in want.keys(True, True):
        assert got[key].dtype == want[key].dtype, key
        assert torch.equal(got[key], want[key]), key


def collected(collector_class, *, num_batches: int = 3):
    """Batches and episode returns of a two-collector LocalCollection, seeded alike every time."""
    torch.manual_seed(0)
    actor = cartpole_modules(num_cells=8)["actor"]
    collection = LocalCollection(
        CARTPOLE, actor, num_collectors=2, frames_per_collector=160, seed=3,
        collector_class=collector_class,
    )  # fmt: skip
    try:
        reasons = [r.collector.lean_reason for r in collection._rollouts if collector_class is None]
        return (
            collection.collector_class,
            reasons,
            [collection.collect() for _ in range(num_batches)],
        )
    finally:
        collection.shutdown()


def test_local_collection_defaults_to_lean_and_yields_torchrls_frames():
    lean_class, reasons, lean = collected(None)
    torchrl_class, _, torchrls = collected(Collector)
    assert lean_class is LeanCollector and torchrl_class is Collector
    assert reasons == [None, None]  # the lean rollout ran in both collectors
    for (want, want_returns), (got, got_returns) in zip(torchrls, lean, strict=True):
        assert got.batch_size == (2, 4, 40)
        assert_same_frames(want, got)
        assert got_returns == want_returns
    dones = torch.stack([batch["next", "done"] for batch, _ in lean])
    assert dones.any() and not dones.all()  # episodes ended and reset inside the batches


def test_gradient_worker_defaults_to_lean_and_keeps_a_users_collector_class():
    codec = TensorDictCodec()

    def worker_step(**spec_kwargs):
        spec = GradientWorkerSpec(
            CARTPOLE, cartpole_modules, cartpole_learner, num_collectors=2,
            frames_per_batch=128, **spec_kwargs,
        )  # fmt: skip
        worker = GradientWorker(0, spec, seed=5)
        try:
            result = worker.compute_gradients()
            batch = codec.decode(worker.last_batch())
            return worker._collection.collector_class, batch, codec.decode(result.grads)
        finally:
            worker.shutdown()

    lean_class, lean_batch, lean_grads = worker_step()
    user_class, torchrl_batch, torchrl_grads = worker_step(collector_class=Collector)
    assert lean_class is LeanCollector and user_class is Collector
    assert_same_frames(torchrl_batch, lean_batch)
    assert_same_frames(torchrl_grads, lean_grads)  # same frames, same gradient


def test_config_resolves_a_users_collector_class_and_rejects_multi_process_ones():
    assert GradientWorkersConfig().collector_class is None  # LeanCollector, chosen by the worker
    assert GradientWorkersConfig(collector_class="single").collector_class is Collector
    assert GradientWorkersConfig(collector_class=LeanCollector).collector_class is LeanCollector
    with pytest.raises(ValueError, match="collector_class='sync' is invalid; accepted: None"):
        GradientWorkersConfig(collector_class="sync")
    with pytest.raises(TypeError, match="collector_class must be a torchrl BaseCollector"):
        GradientWorkersConfig(collector_class=dict)
