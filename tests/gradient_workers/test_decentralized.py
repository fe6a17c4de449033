"""Decentralized gradient workers: a real gloo group between Ray actors, bit-identical weights."""

from __future__ import annotations

import pytest
import torch

from tdscheme.testing import kill_and_wait
from tdscheme.transport import TensorDictCodec

from .helpers import cartpole_coordinator

codec = TensorDictCodec()


@pytest.fixture(scope="module")
def coordinator(coordinators):
    return coordinators(lambda: cartpole_coordinator(decentralized=True, timeout_s=60.0))


def worker_weights(coordinator):
    return [
        codec.decode(coordinator.pool.call(i, "weights", timeout_s=30))
        for i in range(len(coordinator.pool))
    ]


def assert_bit_identical(*tds):
    first, *others = tds
    for other in others:
        assert set(other.keys(True, True)) == set(first.keys(True, True))
        for key, value in first.items(True, True):
            assert torch.equal(value, other.get(key)), key


def test_workers_hold_bit_identical_weights_after_k_steps(coordinator):
    start = coordinator.learner.weights()
    for k in range(1, 4):
        metrics = coordinator.step()
        assert metrics["version"] == k and metrics["updates"] == 1
        assert metrics["grads_applied"] == 2 and metrics["frames"] == 128
        assert {"allreduce_ms", "apply_ms", "wait_ms", "dispatch_ms"} <= set(metrics)
    weights = worker_weights(coordinator)
    assert_bit_identical(*weights, coordinator.learner.weights())  # the driver mirrors rank 0
    assert not torch.equal(
        start["critic_network_params", "module", "0", "weight"],
        weights[0]["critic_network_params", "module", "0", "weight"],
    )
    states = [coordinator.pool.call(i, "learner_state", timeout_s=30) for i in (0, 1)]
    assert states[0]["version"] == states[1]["version"] == 3


def test_a_killed_worker_is_recreated_the_group_rebuilt_and_weights_stay_identical(coordinator):
    version = coordinator.learner.version
    kill_and_wait(coordinator.pool.actors()[1])
    metrics = coordinator.step()
    assert metrics["restarts"] == 1 and metrics["version"] == version + 1
    metrics = coordinator.step()
    assert metrics["version"] == version + 2
    assert_bit_identical(*worker_weights(coordinator), coordinator.learner.weights())
    assert coordinator.stats()["restarts_per_worker"] == [0, 1]


def test_state_dict_round_trip_reaches_every_worker(coordinator):
    state = coordinator.state_dict()
    coordinator.step()
    coordinator.load_state_dict(state)
    assert coordinator.learner.version == state["learner"]["version"]
    weights = worker_weights(coordinator)
    assert_bit_identical(*weights, coordinator.learner.weights())
    coordinator.step()
    assert_bit_identical(*worker_weights(coordinator))
