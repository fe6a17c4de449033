"""Errors inside gradient workers reach the driver with the worker id and remote traceback."""

from __future__ import annotations

import functools
import time

import pytest

from tdscheme.errors import GradientWorkerError
from tdscheme.gradient_workers import build_gradient_coordinator, decentralized
from tdscheme.testing import cartpole_learner, cartpole_modules, make_env

from .helpers import cartpole, new_learner, small_config


def test_a_raising_worker_fails_a_decentralized_step_without_waiting_for_the_group(
    ray_clean, monkeypatch
):
    # the driver waits this long after an error for a peer's death that would explain it
    # (10 s); none comes here, so a shorter wait tells the same
    monkeypatch.setattr(decentralized, "_DEATH_GRACE_S", 2.0)
    faulty = functools.partial(make_env, "CartPole-v1", raise_at_step=100)  # in the 2nd batch
    config = small_config(decentralized=True, timeout_s=120.0)
    with build_gradient_coordinator(
        config, env_factory=[cartpole, faulty], policy_factory=cartpole_modules,
        learner_factory=cartpole_learner, learner=new_learner(),
    ) as coordinator:  # fmt: skip
        coordinator.step()
        start = time.monotonic()
        with pytest.raises(GradientWorkerError, match="gradient worker 1") as info:
            coordinator.step()
        # rank 0 is stuck in the all-reduce until the group times out (120 s); the driver
        # reports rank 1's error once no death explains it (the grace)
        assert time.monotonic() - start < 60.0
        assert "injected failure" in info.value.remote_traceback
        assert info.value.worker_id == 1
        with pytest.raises(RuntimeError, match="process group is broken"):
            coordinator.step()
