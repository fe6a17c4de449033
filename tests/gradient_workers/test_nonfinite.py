"""NaN / inf from a gradient worker's env: its gradient is left out, counted and named, in every mode.

Worker 0's env gives one inf reward at step 129 (its third 64-frame batch; none in the
asynchronous test), worker 1's an inf reward at every step from 65 on (its second batch
onward). The driver Learner
keeps ``max_nonfinite_updates=3`` (``cartpole_learner``'s default).
"""

from __future__ import annotations

import functools
import logging

import pytest
import torch

from tdscheme.errors import NonFiniteUpdateError
from tdscheme.gradient_workers import build_gradient_coordinator
from tdscheme.testing import cartpole_learner, cartpole_modules, make_env
from tdscheme.transport import TensorDictCodec

from .helpers import cartpole, new_learner, small_config

codec = TensorDictCodec()
inf_once = functools.partial(
    make_env, "CartPole-v1", nonfinite_at_step=129, nonfinite_value=float("inf")
)
inf_from_second_batch = functools.partial(
    make_env, "CartPole-v1", nonfinite_at_step=65, nonfinite_value=float("inf"),
    nonfinite_every=True,
)  # fmt: skip
WORKER_1_STOPS = r"gradient worker 1 sent max_nonfinite_updates=3 non-finite .*'reward'"


def build(config, worker_0_env=inf_once):
    return build_gradient_coordinator(
        config, env_factory=[worker_0_env, inf_from_second_batch],
        policy_factory=cartpole_modules, learner_factory=cartpole_learner, learner=new_learner(),
    )  # fmt: skip


def all_finite(weights) -> bool:
    return all(bool(torch.isfinite(v).all()) for v in weights.values(True, True))


def assert_bit_identical(first, *others):
    for other in others:
        for key, value in first.items(True, True):
            assert torch.equal(value, other.get(key)), key


def worker_weights(coordinator):
    return [codec.decode(coordinator.pool.call(i, "weights", timeout_s=30)) for i in (0, 1)]


def check_the_three_steps(coordinator, *, decentralized: bool = False):
    """Steps 1-3: both finite; worker 1 left out; both left out (no update)."""
    one = coordinator.step()
    assert one["grads_applied"] == 2 and one["grads_nonfinite"] == 0 and one["version"] == 1
    two = coordinator.step()  # worker 1's second batch holds inf: worker 0's gradient alone
    assert two["grads_applied"] == 1 and two["grads_nonfinite"] == 1 and two["updates"] == 1
    assert two["frames"] == 64 and two["grads_dropped"] == 1 and two["frames_dropped"] == 64
    assert two["version"] == 2 and two["grads_nonfinite_total"] == 1
    weights = coordinator.learner.weights()
    assert all_finite(weights)
    if decentralized:
        assert_bit_identical(weights, *worker_weights(coordinator))
    three = coordinator.step()  # both non-finite: no update anywhere, nothing changes
    assert three["grads_applied"] == 0 and three["grads_nonfinite"] == 2
    assert three["updates"] == 0 and three["version"] == 2 and three["frames"] == 0
    assert three["grads_nonfinite_total"] == 3
    assert_bit_identical(weights, coordinator.learner.weights())
    if decentralized:
        assert_bit_identical(weights, *worker_weights(coordinator))


@pytest.mark.timeout(180)
@pytest.mark.parametrize("decentralized", [False, True], ids=["synchronous", "decentralized"])
def test_synchronous_modes_go_on_without_a_bad_gradient_and_stop_on_a_persistent_one(
    ray_clean, caplog, decentralized
):
    config = small_config(decentralized=decentralized, timeout_s=60.0)
    with build(config) as coordinator, caplog.at_level(logging.WARNING):
        check_the_three_steps(coordinator, decentralized=decentralized)
        assert any(
            "gradient worker 1 sent a non-finite gradient, left out" in r.getMessage()
            and "'reward'" in r.getMessage()
            for r in caplog.records
        )
        # worker 0 is finite again; worker 1's third non-finite gradient in a row stops the run
        with pytest.raises(NonFiniteUpdateError, match=WORKER_1_STOPS):
            coordinator.step()
        assert coordinator.stats()["grads_nonfinite"] == 4
        assert all_finite(coordinator.learner.weights())
        if decentralized:
            assert_bit_identical(coordinator.learner.weights(), *worker_weights(coordinator))


@pytest.mark.timeout(180)
def test_asynchronous_mode_applies_the_others_and_stops_on_a_persistent_bad_worker(ray_clean):
    config = small_config(communication="asynchronous", grads_per_step=2)
    steps = []
    with build(config, worker_0_env=cartpole) as coordinator:
        with pytest.raises(NonFiniteUpdateError, match=WORKER_1_STOPS):
            for _ in range(50):  # worker 1 sends about every other gradient
                steps.append(coordinator.step())
        # each step went on past worker 1's gradients, applying none of them; the step that
        # received its 3rd in a row raised at its end (with grads_per_step=2: its 3rd or 4th)
        assert coordinator.stats()["grads_nonfinite"] in (3, 4)
        assert all(m["grads_applied"] == m["updates"] for m in steps)
        assert coordinator.learner.version == coordinator.stats()["grads_applied"] > 0
        assert all_finite(coordinator.learner.weights())
