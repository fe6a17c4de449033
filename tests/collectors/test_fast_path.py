"""Whether each worker runs tdscheme's lean rollout: said at start, in stats() and once in the log."""

from __future__ import annotations

import functools
import logging
import time

import ray
from torchrl.collectors import Collector
from torchrl.envs import CatFrames, TransformedEnv

from tdscheme import RayCollector
from tdscheme.envs import make_env
from tdscheme.scheme.metrics import numeric_stats
from tdscheme.testing import mlp_policy

SMALL = {"num_cpus": 0.5}
cartpole = functools.partial(make_env, "CartPole-v1")
OFF_PATH = "tdscheme.collectors.driver.pool"


def fast_path_stats(collector: RayCollector) -> list[bool | str]:
    """Each worker's status, the same in stats() and counters(), and its share in the metrics."""
    stats = collector.stats()
    assert stats["fast_path"] == collector.counters()["fast_path"]
    on_path = sum(status is True for status in stats["fast_path"]) / collector.num_workers
    assert numeric_stats(stats, "collector")["collector/fast_path"] == on_path
    return stats["fast_path"]


def fast_path(caplog, create_env_fn, num_collectors=1, **kwargs):
    caplog.set_level(logging.INFO, logger=OFF_PATH)
    with RayCollector(
        create_env_fn, mlp_policy(4, 2), frames_per_batch=20, total_frames=-1,
        num_collectors=num_collectors, remote_configs=SMALL, **kwargs,
    ) as collector:  # fmt: skip
        statuses = fast_path_stats(collector)
    logged = [r.getMessage() for r in caplog.records if r.name == OFF_PATH]
    return statuses, logged


def test_default_collector_on_cartpole_is_on_the_fast_path(ray_clean, caplog):
    assert fast_path(caplog, cartpole) == ([True], [])


def test_a_users_collector_class_is_named_once_even_for_a_rebuilt_worker(ray_clean, caplog):
    """Two workers off the path for one reason: one log line; a rebuilt one reports again, unlogged."""
    caplog.set_level(logging.INFO, logger=OFF_PATH)
    reason = (
        "collector_class=Collector: tdscheme's lean rollout runs only in its default LeanCollector"
    )
    with RayCollector(
        cartpole, mlp_policy(4, 2), frames_per_batch=20, total_frames=-1, num_collectors=2,
        remote_configs=SMALL, collector_class=Collector,
    ) as collector:  # fmt: skip
        assert fast_path_stats(collector) == [reason, reason]
        logged = [r.getMessage() for r in caplog.records if r.name == OFF_PATH]
        assert logged == [f"collector workers [0, 1] run off the fast path: {reason}"]
        batches = iter(collector)
        next(batches)
        ray.kill(collector.workers[0], no_restart=True)
        while collector.stats()["restarts"] == 0:
            next(batches)  # the dead worker's reply says it died; it is rebuilt
        deadline = time.monotonic() + 60
        statuses = collector.counters()["fast_path"]
        while collector._pool._rebuilt and time.monotonic() < deadline:  # asked, not waited on
            time.sleep(0.1)
            statuses = collector.counters()["fast_path"]
        assert not collector._pool._rebuilt and statuses == [reason, reason]
    logged = [r for r in caplog.records if r.name == OFF_PATH]
    assert len(logged) == 1  # the same reason again is not logged again


def test_an_env_the_lean_rollout_refuses_gives_its_reason(ray_clean, caplog):
    def stacked_cartpole():  # local: Ray ships it by value (tests/ is no package)
        stack = CatFrames(N=2, dim=-1, in_keys=["observation"], out_keys=["stacked"])
        return TransformedEnv(make_env("CartPole-v1"), stack)

    statuses, logged = fast_path(caplog, stacked_cartpole)
    reason = (
        "torchrl's rollout: the env's CatFrames renames keys (out_keys) or inverts (in_keys_inv)"
    )
    assert statuses == [reason]
    assert logged == [f"collector workers [0] run off the fast path: {reason}"]


def test_compact_obs_runs_on_the_fast_path_and_batches_keep_torchrls_layout(ray_clean, caplog):
    """``collector_kwargs={"compact_obs": True}``: the lean rollout, no ``("next", obs)``."""
    caplog.set_level(logging.INFO, logger=OFF_PATH)
    kwargs = {"collector_kwargs": {"compact_obs": True}}
    # first-ready batches need one worker; stacked ones two
    for stacked, num_collectors in ((False, 1), (True, 2)):
        with RayCollector(
            cartpole, mlp_policy(4, 2), frames_per_batch=40, total_frames=160,
            num_collectors=num_collectors, remote_configs=SMALL, sync=stacked, **kwargs,
        ) as collector:  # fmt: skip
            assert fast_path_stats(collector) == [True] * num_collectors
            batches = list(collector)
        assert sum(b.numel() for b in batches) == 160
        for batch in batches:
            keys = set(batch.keys(True, True))
            assert ("next", "observation") not in keys and "observation" in keys
            assert {("next", "reward"), ("next", "done"), ("next", "truncated")} <= keys
    assert [r for r in caplog.records if r.name == OFF_PATH] == []
