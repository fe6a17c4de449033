"""Synchronous, centralized gradient workers on a real Ray with real CartPole and torchrl losses."""

from __future__ import annotations

import functools
import time

import pytest
import torch

from tdscheme.collectors import PreemptionConfig
from tdscheme.gradient_workers import GradientWorkerSpec, SynchronousCoordinator
from tdscheme.testing import cartpole_learner, cartpole_modules, kill_and_wait, make_env
from tdscheme.transport import TensorDictCodec

from .helpers import cartpole, new_learner, small_config

# Averaged float32 gradients vs one backward pass over all frames: the same sums in
# another order, so agreement to a few float32 ulps.
ATOL, RTOL = 1e-6, 1e-5
codec = TensorDictCodec()
# SGD with lr=1 and no clipping: the weights move by exactly minus the applied gradient.
sgd_learner = functools.partial(
    cartpole_learner, loss="ppo", max_grad_norm=None,
    optimizer=functools.partial(torch.optim.SGD, lr=1.0),
)  # fmt: skip


@pytest.fixture(scope="module")
def coordinator(coordinators):
    # Unequal batches (64 and 32 frames) so that the frame weighting matters.
    specs = [
        GradientWorkerSpec(cartpole, cartpole_modules, sgd_learner, frames_per_batch=frames)
        for frames in (64, 32)
    ]
    return coordinators(
        lambda: SynchronousCoordinator(small_config(), specs, new_learner(sgd_learner))
    )


@pytest.mark.fast
def test_one_step_equals_one_learner_step_on_the_concatenated_batch(coordinator):
    before = coordinator.learner.weights()
    metrics = coordinator.step()
    assert metrics["frames"] == 96 and metrics["grads_applied"] == 2
    assert metrics["updates"] == 1 and metrics["version"] == 1 and metrics["grads_dropped"] == 0
    assert {"wait_ms", "apply_ms", "dispatch_ms", "collect_ms", "loss"} <= set(metrics)

    batches = [codec.decode(coordinator.pool.call(i, "last_batch", timeout_s=30)) for i in (0, 1)]
    assert [b.numel() for b in batches] == [64, 32]
    reference = new_learner(sgd_learner)
    reference.load_weights(before)
    # GAE runs per worker batch (a trajectory must not run into another worker's), then
    # one backward pass over all 96 frames.
    estimator, reference.value_estimator = reference.value_estimator, None
    with torch.no_grad():
        prepared = torch.cat([estimator(b.clone()) for b in batches], dim=0)
    grads, ref_metrics = reference.compute_gradients(prepared)
    reference.apply_gradients(grads)
    after = coordinator.learner.weights()
    for key, value in reference.weights().items(True, True):
        torch.testing.assert_close(after.get(key), value, atol=ATOL, rtol=RTOL, msg=str(key))
    assert metrics["applied_grad_norm"] == pytest.approx(float(ref_metrics["grad_norm"]), rel=1e-5)


def test_a_killed_worker_is_recreated_from_the_current_weights(coordinator):
    version = coordinator.learner.version
    kill_and_wait(coordinator.pool.actors()[1])
    metrics = coordinator.step()
    assert metrics["restarts"] == 1 and metrics["grads_applied"] == 2
    assert coordinator.stats()["restarts_per_worker"] == [0, 1]
    assert coordinator.learner.version == version + 1
    metrics = coordinator.step()
    assert metrics["grads_applied"] == 2 and metrics["grads_dropped"] == 0


def test_state_dict_round_trip_restores_learner_and_workers(coordinator):
    state = coordinator.state_dict()
    saved = coordinator.learner.weights()
    coordinator.step()
    coordinator.load_state_dict(state)
    assert coordinator.learner.version == state["learner"]["version"]
    assert coordinator.stats()["steps"] == state["totals"]["steps"]
    for i in (0, 1):
        weights = codec.decode(coordinator.pool.call(i, "weights", timeout_s=30))
        assert (weights == saved).all()
    assert coordinator.step()["version"] == state["learner"]["version"] + 1
    with pytest.raises(ValueError, match="saved by a 'decentralized' coordinator"):
        coordinator.load_state_dict({**state, "mode": "decentralized"})


def test_preemption_leaves_a_slow_worker_out_and_drops_its_stale_gradient(coordinators):
    slow = functools.partial(make_env, "CartPole-v1", sleep_s=0.05)  # >= 3.2 s per gradient
    config = small_config(preemption=PreemptionConfig(0.5, 0.5))
    specs = [
        GradientWorkerSpec(env_fn, cartpole_modules, cartpole_learner, frames_per_batch=64)
        for env_fn in (cartpole, slow)
    ]
    coordinator = coordinators(lambda: SynchronousCoordinator(config, specs, new_learner()))
    steps = []
    deadline = time.monotonic() + 60  # the slow gradient takes >= 3.2 s; fast steps may be ms
    while time.monotonic() < deadline:
        steps.append(coordinator.step())
        if sum(m["grads_dropped"] for m in steps) >= 1 and len(steps) >= 3:
            break
    assert steps[0]["preempted"] == 1 and steps[0]["grads_applied"] == 1
    assert all(m["updates"] == 1 for m in steps)
    assert coordinator.learner.version == len(steps)
    dropped = sum(m["grads_dropped"] for m in steps)
    assert dropped >= 1
    assert sum(m["frames_dropped"] for m in steps) == 64 * dropped
    stats = coordinator.stats()
    assert stats["grads_dropped"] == dropped and stats["frames_dropped"] == 64 * dropped
    coordinator.shutdown()
    coordinator.shutdown()  # idempotent
    with pytest.raises(RuntimeError, match="was shut down"):
        coordinator.step()
