"""An env or policy that raises inside a worker: rebuilt like a dead worker, then a WorkerError.

As RLlib's ``restart_failed_env_runners``: a simulator that raises now and then costs one
batch (counted as lost) and a rebuild, not the run; one that raises after every restart
stops the run after ``max_restarts`` with the worker id and the remote traceback. Both in
iteration and in background collection (``start()``), where the error re-raises at the next
collector call with its own type. Real Ray actors, real gymnasium envs.
"""

from __future__ import annotations

import functools

import pytest

from tdscheme import RayCollector
from tdscheme.errors import WorkerError
from tdscheme.testing import make_env, mlp_policy

SMALL = {"remote_configs": {"num_cpus": 0.5}}
cartpole = functools.partial(make_env, "CartPole-v1")


def _assert_balanced(stats, total):
    ledger = stats["ledger"]
    assert ledger["balanced"] and ledger["in_flight"] == 0 and ledger["yielded"] == total, ledger


def test_an_env_that_raises_once_costs_a_batch_not_the_run(ray_clean, tmp_path):
    flaky = functools.partial(
        make_env, "CartPole-v1", raise_at_step=60, once_path=str(tmp_path / "raised")
    )
    with RayCollector(
        [cartpole, flaky], mlp_policy(4, 2), frames_per_batch=50, total_frames=1_000,
        num_collectors=2, **SMALL,
    ) as collector:  # fmt: skip
        frames = sum(batch.numel() for batch in collector)
        stats = collector.stats(timeout=10)
    assert frames == 1_000
    assert stats["restarts_per_worker"] == [0, 1], stats
    assert stats["frames_lost"] > 0  # the batch the raise interrupted
    _assert_balanced(stats, 1_000)


@pytest.fixture
def buffer(ray_replay_buffer):
    return ray_replay_buffer


def test_background_collection_rebuilds_a_worker_whose_env_raised(buffer, tmp_path):
    flaky = functools.partial(
        make_env, "CartPole-v1", raise_at_step=60, once_path=str(tmp_path / "raised")
    )
    with RayCollector(
        [cartpole, flaky], mlp_policy(4, 2), frames_per_batch=50, total_frames=1_000,
        num_collectors=2, replay_buffer=buffer, **SMALL,
    ) as collector:  # fmt: skip
        collector.start()
        _wait_until_stopped(collector)
        stats = collector.stats(timeout=10)
    assert len(buffer) == 1_000 and stats["completed"], stats
    assert stats["restarts_per_worker"] == [0, 1], stats
    _assert_balanced(stats, 1_000)


def test_background_collection_past_max_restarts_raises_the_worker_error(buffer):
    """Before: a RuntimeError("background collection failed: ...") at once, no restart."""
    failing = functools.partial(make_env, "CartPole-v1", raise_at_step=30)
    with RayCollector(
        [cartpole, failing], mlp_policy(4, 2), frames_per_batch=50, total_frames=100_000,
        num_collectors=2, replay_buffer=buffer, max_restarts=1, **SMALL,
    ) as collector:  # fmt: skip
        collector.start()
        _wait_until_stopped(collector)
        with pytest.raises(WorkerError) as info:
            collector.stats(timeout=10)
        stats = collector.stats(timeout=10)  # raised once; the counts stay readable
    error = info.value
    assert error.worker_id == 1 and "failed 2 times, max_restarts=1" in str(error)
    assert "injected failure at step 30" in error.remote_traceback
    assert any("background collection" in note for note in error.__notes__)
    assert stats["restarts_per_worker"] == [0, 1] and not stats["completed"]
    assert stats["ledger"]["balanced"], stats["ledger"]


def _wait_until_stopped(collector, timeout_s: float = 120.0) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while collector.is_running:
        assert time.monotonic() < deadline, "background collection did not stop"
        time.sleep(0.1)
