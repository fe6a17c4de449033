"""A hung gradient worker (centralized modes) is killed, rebuilt and asked again; not a TimeoutError.

Worker 1's env hangs at env step 70 (in its second 64-frame batch) after every restart,
and ``max_restarts=1``: its first hang is replaced, the rebuilt worker's hangs again and
ends the run with an error naming the worker and ``timeout_s``.
"""

from __future__ import annotations

import functools
import logging

import pytest

from tdscheme.errors import GradientWorkerError
from tdscheme.gradient_workers import build_gradient_coordinator
from tdscheme.testing import cartpole_learner, cartpole_modules, make_env

from .helpers import cartpole, new_learner, small_config

hangs = functools.partial(make_env, "CartPole-v1", hang_at_step=70)
EXHAUSTED = r"gradient worker 1: .*max_restarts=1.*hung: sent no gradient in timeout_s=3 s"


def build(config):
    return build_gradient_coordinator(
        config, env_factory=[cartpole, hangs], policy_factory=cartpole_modules,
        learner_factory=cartpole_learner, learner=new_learner(),
    )  # fmt: skip


@pytest.mark.timeout(240)
def test_synchronous_replaces_a_hung_worker_and_stops_when_its_restarts_are_spent(
    ray_clean, caplog
):
    caplog.set_level(logging.WARNING, logger="tdscheme")
    config = small_config(timeout_s=3.0, max_restarts=1)
    with build(config) as coordinator:
        first = coordinator.step()
        assert first["hung"] == 0 and first["grads_applied"] == 2
        second = coordinator.step()  # worker 1 hangs, is rebuilt and delivers its first batch
        assert second["hung"] == 1 and second["restarts"] == 1
        assert second["grads_applied"] == 2 and second["version"] == 2
        assert coordinator.stats()["restarts_per_worker"] == [0, 1]
        assert (
            "restarting gradient worker 1: hung: sent no gradient in timeout_s=3 s" in caplog.text
        )
        with pytest.raises(GradientWorkerError, match=EXHAUSTED) as info:
            coordinator.step()  # the rebuilt worker hangs in its second batch: no restart left
        assert info.value.worker_id == 1
        assert coordinator.stats()["hung"] == 2 and coordinator.learner.version == 2


@pytest.mark.timeout(240)
def test_asynchronous_keeps_applying_the_others_while_a_worker_hangs(ray_clean):
    config = small_config(communication="asynchronous", timeout_s=3.0, max_restarts=1)
    steps = []
    with build(config) as coordinator:
        with pytest.raises(GradientWorkerError, match=EXHAUSTED):
            for _ in range(100_000):  # bounded by the hangs: 2 x timeout_s (and the timeout)
                steps.append(coordinator.step())
        hung_at = next(i for i, m in enumerate(steps) if m["hung"] == 1)
        assert steps[hung_at]["restarts"] == 1
        # worker 0 kept the steps going while worker 1 hung, and after its rebuild
        assert (
            steps[hung_at - 1]["version"] > 2 and steps[-1]["version"] > steps[hung_at]["version"]
        )
        assert coordinator.stats()["hung"] == 2
