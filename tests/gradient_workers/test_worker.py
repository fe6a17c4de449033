"""GradientWorker in-process (no Ray): real CartPole collectors, real torchrl losses."""

from __future__ import annotations

import functools

import pytest
import torch
from tensordict import TensorDict

from tdscheme.gradient_workers import GradientWorker, GradientWorkerSpec
from tdscheme.runtime.allreduce import free_port
from tdscheme.testing import cartpole_learner, cartpole_modules, make_env
from tdscheme.transport import TensorDictCodec

codec = TensorDictCodec()


def spec(**overrides) -> GradientWorkerSpec:
    kwargs = dict(env_factory=make_env, policy_factory=cartpole_modules,
                  learner_factory=cartpole_learner, frames_per_batch=64)  # fmt: skip
    kwargs.update(overrides)
    return GradientWorkerSpec(**kwargs)


@pytest.fixture
def worker():
    worker = GradientWorker(0, spec(num_collectors=2), seed=0)
    yield worker
    worker.shutdown()


def assert_equal_tds(a: TensorDict, b: TensorDict) -> None:
    assert set(a.keys(True, True)) == set(b.keys(True, True))
    for key, value in a.items(True, True):
        assert torch.equal(value, b.get(key)), key


def test_compute_gradients_is_the_learners_gradient_of_the_batch_it_collected(worker):
    result = worker.compute_gradients()
    batch = codec.decode(worker.last_batch())
    assert batch.batch_size == (2, 32)  # two collectors, 32 frames each, stacked
    assert result.frames == 64 and result.version == 0 and result.worker_id == 0
    reference = cartpole_learner(**cartpole_modules())
    reference.load_weights(worker.learner.weights())
    grads, metrics = reference.compute_gradients(batch)
    assert_equal_tds(codec.decode(result.grads), grads)
    assert result.metrics["loss"] == pytest.approx(float(metrics["loss"]))
    assert {"collect_ms", "compute_ms", "encode_ms"} == set(result.timings_ms)
    assert worker.state()["frames"] == 64


def test_weights_round_trip_and_versions(worker):
    other = cartpole_learner(**cartpole_modules())
    assert worker.set_weights(codec.encode(other.weights()), 7) == 7
    assert_equal_tds(codec.decode(worker.weights()), other.weights())
    result = worker.compute_gradients()
    assert result.version == 7
    assert worker.apply_gradients(result.grads)["version"] == 8.0
    # weights given with the version the worker holds are not reloaded
    worker.compute_gradients(codec.encode(other.weights()), 8)
    assert not torch.equal(
        codec.decode(worker.weights())["actor_network_params", "module", "0", "module", "0",
                                       "bias"],
        other.weights()["actor_network_params", "module", "0", "module", "0", "bias"],
    )  # fmt: skip
    with pytest.raises(ValueError, match="without their version"):
        worker.compute_gradients(codec.encode(other.weights()))


def test_episode_returns_are_reported():
    worker = GradientWorker(0, spec(frames_per_batch=400), seed=1)
    try:
        result = worker.compute_gradients()
    finally:
        worker.shutdown()
    # a near-uniform policy ends CartPole episodes after ~10-40 steps
    assert len(result.episode_returns) >= 5
    assert all(1.0 <= r <= 400.0 for r in result.episode_returns)
    assert sum(result.episode_returns) <= 400.0


def test_step_allreduce_with_one_rank_equals_compute_and_apply():
    worker = GradientWorker(0, spec(), seed=3)
    try:
        with pytest.raises(RuntimeError, match="needs setup_process_group"):
            worker.step_allreduce()
        before = codec.decode(worker.weights())
        worker.setup_process_group(0, 1, "127.0.0.1", free_port(), 30.0)
        result = worker.step_allreduce(return_weights=True)
        worker.destroy_process_group()
        assert result.grads is None and result.version == 1 and result.frames == 64
        assert {"allreduce_ms", "apply_ms"} <= set(result.timings_ms)
        # The same batch through a fresh learner: bit-identical weights (one rank's
        # weighted mean g * f / f is exact in float64).
        reference = cartpole_learner(**cartpole_modules())
        reference.load_weights(before)
        grads, _ = reference.compute_gradients(codec.decode(worker.last_batch()))
        reference.apply_gradients(grads)
        assert_equal_tds(codec.decode(result.weights), reference.weights())
    finally:
        worker.shutdown()


def test_learner_state_moves_between_workers(worker):
    worker.apply_gradients(worker.compute_gradients().grads)
    other = GradientWorker(1, spec(env_factory=functools.partial(make_env, "CartPole-v1")))
    try:
        assert other.load_learner_state(worker.learner_state()) == 1
        assert_equal_tds(codec.decode(other.weights()), codec.decode(worker.weights()))
    finally:
        other.shutdown()
    worker.shutdown()
    worker.shutdown()  # idempotent


def test_compressed_payloads_decode_to_the_same_values():
    plain, packed = (GradientWorker(0, spec(compress=c), seed=0) for c in (False, True))
    try:
        assert_equal_tds(codec.decode(packed.weights()), codec.decode(plain.weights()))
        grads = codec.decode(packed.compute_gradients().grads)
        params = plain.learner.loss_module.named_parameters()
        assert set(grads.keys(True, True)) == {tuple(name.split(".")) for name, _ in params}
    finally:
        plain.shutdown()
        packed.shutdown()


def test_a_nonfinite_gradient_is_not_sent_and_a_lone_rank_skips_its_update():
    inf_rewards = functools.partial(
        make_env, "CartPole-v1", nonfinite_at_step=1, nonfinite_value=float("inf"),
        nonfinite_every=True,
    )  # fmt: skip
    worker = GradientWorker(0, spec(env_factory=inf_rewards), seed=0)
    try:
        result = worker.compute_gradients()
        assert result.grads is None and result.frames == 64
        assert "('next', 'reward')" in result.nonfinite
        before = codec.decode(worker.weights())
        worker.setup_process_group(0, 1, "127.0.0.1", free_port(), 30.0)
        result = worker.step_allreduce(return_weights=True)
        # weight 0 from the only rank: no mean, no step, no new version
        assert result.nonfinite is not None and result.version == 0
        assert "applied_grad_norm" not in result.metrics
        assert_equal_tds(codec.decode(result.weights), before)
    finally:
        worker.shutdown()
