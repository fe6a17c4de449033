"""Asynchronous (A3C-style) gradient workers on a real Ray: staleness, drops, restarts."""

from __future__ import annotations

import pytest
import ray

from tdscheme.testing import kill_and_wait

from .helpers import cartpole_coordinator


@pytest.fixture(scope="module")
def coordinator(coordinators):
    return coordinators(
        lambda: cartpole_coordinator(communication="asynchronous", grads_per_step=6)
    )


def test_each_gradient_is_applied_on_arrival_and_its_staleness_recorded(coordinator):
    assert coordinator.mode == "asynchronous"
    # Both actors up first: if one were still starting, the other could deliver all six
    # gradients of the step on fresh weights and no staleness would show.
    ray.get([actor.ping.remote() for actor in coordinator.pool.actors()], timeout=120)
    metrics = coordinator.step()
    assert metrics["grads_applied"] == metrics["updates"] == 6
    assert metrics["version"] == 6 and metrics["grads_dropped"] == 0
    # Both workers start on version 0 and only the sender gets fresh weights, so
    # whichever gradient arrives second was computed on weights one update old.
    assert metrics["staleness_max"] >= 1
    assert 0 < metrics["staleness_mean"] <= metrics["staleness_max"]
    assert {"wait_ms", "apply_ms", "dispatch_ms"} <= set(metrics)
    assert metrics["apply_ms"] > 0 and metrics["dispatch_ms"] > 0


def test_gradients_past_max_staleness_are_dropped_and_counted(coordinator):
    # Same actors, tighter bound (the config is read at every step).
    coordinator.config.max_grad_staleness = 0
    try:
        steps = [coordinator.step() for _ in range(2)]
    finally:
        coordinator.config.max_grad_staleness = None
    dropped = sum(m["grads_dropped"] for m in steps)
    applied = sum(m["grads_applied"] for m in steps)
    assert dropped >= 1 and applied + dropped == 12
    assert all(m.get("staleness_max", 0.0) == 0.0 for m in steps)
    assert max(m.get("staleness_dropped_max", 0.0) for m in steps) >= 1
    assert sum(m["frames_dropped"] for m in steps) == 64 * dropped
    assert coordinator.stats()["grads_dropped"] == dropped


def test_a_killed_worker_is_recreated_and_the_run_continues(coordinator):
    version = coordinator.learner.version
    kill_and_wait(coordinator.pool.actors()[0])
    metrics = coordinator.step()
    assert metrics["restarts"] == 1 and metrics["grads_applied"] + metrics["grads_dropped"] == 6
    assert coordinator.learner.version == version + metrics["updates"]
    assert coordinator.stats()["restarts_per_worker"] == [1, 0]


def test_state_dict_round_trip(coordinator):
    state = coordinator.state_dict()
    coordinator.step()
    coordinator.load_state_dict(state)
    assert coordinator.learner.version == state["learner"]["version"]
    metrics = coordinator.step()
    # every worker got the restored weights and version: nothing is stale by more than
    # the updates of this step
    assert metrics["staleness_max"] <= 5
