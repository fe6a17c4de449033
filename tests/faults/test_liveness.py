"""Liveness: a hung worker is declared hung, killed and rebuilt; elastic runs go on without it."""

from __future__ import annotations

import functools
import logging
import os
import signal
import time

import pytest
import ray

from tdscheme import RayCollector
from tdscheme.keys import WORKER_ID_KEY
from tdscheme.testing import make_env

TRAJ_IDS = ("collector", "traj_ids")


def _assert_balanced(ledger: dict, yielded: int) -> None:
    parts = ("yielded", "dropped", "preempted", "lost", "discarded")
    assert ledger["collected"] == sum(ledger[p] for p in parts), ledger
    assert ledger["balanced"] and ledger["in_flight"] == 0, ledger
    assert ledger["yielded"] == yielded, ledger


def _assert_books_agree(collector) -> None:
    """The ledger's requests in flight are the flow's own record of them; it balances."""
    in_flight = collector._flow.requests.asked()
    assert collector._stats.ledger.requests_in_flight() == in_flight
    books = collector._stats.ledger.as_dict()
    assert books["in_flight"] == sum(in_flight.values()) and books["balanced"], books


@pytest.mark.timeout(150)
@pytest.mark.parametrize("sync", [False, True])
def test_a_hung_worker_is_killed_and_rebuilt(ray_clean, tmp_path, caplog, sync):
    hang = functools.partial(make_env, hang_at_step=25, once_path=str(tmp_path / "hung"))
    caplog.set_level(logging.WARNING, logger="tdscheme")
    ids_by_worker: dict[int, list] = {0: [], 1: []}
    with RayCollector(
        hang, frames_per_batch=20, total_frames=190, num_collectors=2, sync=sync, seed=0,
        worker_stall_timeout_s=1.0, batch_timeout_s=120,
    ) as collector:  # fmt: skip
        seen = 0
        for batch in collector:
            _assert_books_agree(collector)
            seen += batch.numel()
            flat = batch.reshape(-1)
            for worker in (0, 1):
                ids = flat[flat[WORKER_ID_KEY] == worker].get(TRAJ_IDS)
                ids_by_worker[worker].append(ids[ids >= 0])
        stats = collector.stats(timeout=5)
    assert seen == 190  # the last batch cut to fit
    assert stats["workers_hung"] == 1 and stats["restarts"] == 1
    assert stats["ledger"]["lost"] >= 10
    _assert_balanced(stats["ledger"], 190)
    assert "declared hung" in caplog.text
    for chunks in ids_by_worker.values():  # a rebuilt worker never reuses trajectory ids
        chunks = [c for c in chunks if c.numel()]
        for before, after in zip(chunks, chunks[1:], strict=False):
            assert int(after.min()) >= int(before.max()), (before, after)


@pytest.mark.timeout(120)
def test_a_frozen_worker_process_is_declared_hung_after_the_stall_timeout(ray_clean):
    """A process that stops answering at all (SIGSTOP) after it has delivered batches.

    In stacked order the worker idles between batches, so each request starts a
    fresh watch that no probe has answered yet; the actor was built long ago, so
    ``worker_stall_timeout_s`` applies, not the 600 s of ``actor_start_timeout_s``.
    One worker: the frozen one (rebuilt, it delivers the rest of the budget).
    """
    with RayCollector(
        make_env, frames_per_batch=20, total_frames=200, num_collectors=1, sync=True, seed=0,
        worker_stall_timeout_s=1.0, actor_start_timeout_s=600, batch_timeout_s=600,
    ) as collector:  # fmt: skip
        batches = iter(collector)
        seen = next(batches).numel() + next(batches).numel()
        frozen = collector.workers[0]
        pid = ray.get(frozen.__ray_call__.remote(lambda self: os.getpid()), timeout=30)
        os.kill(pid, signal.SIGSTOP)
        try:
            for batch in batches:
                _assert_books_agree(collector)
                seen += batch.numel()
        finally:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass  # killed as hung, as it should be
        stats = collector.stats(timeout=5)
    assert seen == 200
    assert stats["workers_hung"] == 1 and stats["restarts"] == 1
    _assert_balanced(stats["ledger"], 200)


@pytest.mark.timeout(120)
def test_a_slow_learner_or_busy_workers_past_the_stall_timeout_are_not_hung(ray_clean):
    """Neither a learner slower than ``worker_stall_timeout_s`` nor workers kept busy past it.

    Found in a Pong soak, both: (1) learner-paced, workers done with their requests wait
    for the consumer: an inline evaluation longer than the timeout had both workers
    killed as hung when the driver came back for the next batch. (2) Two requests ahead,
    a consumer a little slower, the workers never idle: the lean rollout's env steps were
    not counted (progress stayed 0), so a worker kept busy longer than the timeout was
    killed as hung while its batches kept arriving. Both count now: env steps, and each
    batch. One run, the two phases in turn.
    """
    slow_batches, busy_batches = 4, 30
    with RayCollector(
        make_env, frames_per_batch=200, total_frames=200 * (slow_batches + busy_batches),
        num_collectors=2, sync=False, seed=0, worker_stall_timeout_s=1.0, prefetch_batches=2,
    ) as collector:  # fmt: skip
        seen = 0
        for i, batch in enumerate(collector):
            seen += batch.numel()
            if i < slow_batches:  # (1) the learner (or an evaluation) takes longer than the timeout
                time.sleep(2.0)
            else:  # (2) under the monitor's 2-interval gap: it keeps watching
                if i == slow_batches:
                    stats = collector.stats(timeout=5)
                    assert stats["workers_hung"] == 0 and stats["restarts"] == 0, stats
                time.sleep(0.2)
        stats = collector.stats(timeout=5)
    assert seen == 200 * (slow_batches + busy_batches)
    assert stats["workers_hung"] == 0 and stats["restarts"] == 0, stats
    _assert_balanced(stats["ledger"], seen)


@pytest.mark.timeout(120)
def test_elastic_min_workers_goes_on_without_a_failed_worker(ray_clean):
    crashing = functools.partial(make_env, exit_at_step=5)
    with RayCollector(
        [crashing, make_env], frames_per_batch=20, total_frames=100, max_restarts=0,
        min_workers=1, seed=0,
    ) as collector:  # fmt: skip
        seen = 0
        for batch in collector:
            _assert_books_agree(collector)
            seen += batch.numel()
        stats = collector.stats(timeout=5)
    assert seen == 100
    assert stats["workers_retired"] == [0]
    assert stats["frames_per_worker"] == {1: 100}
    _assert_balanced(stats["ledger"], 100)


@pytest.mark.timeout(150)
def test_a_worker_that_hangs_again_after_its_rebuild_does_not_hold_first_ready_order(
    ray_clean, tmp_path
):
    """The released frames go to the healthy worker; the rebuilt one rests while it could hang.

    Worker 1's env hangs after 150 steps, and its rebuilt actor hangs at its first step: the
    healthy worker 0 takes the lost request and what is left of the budget, and the run ends
    with worker 1 rebuilt once or twice, never past max_restarts.
    """
    marker = str(tmp_path / "hung")

    def hangs_again() -> object:  # local: Ray ships it by value (tests/ is no package)
        first = not os.path.exists(marker)
        open(marker, "a").close()  # noqa: SIM115 - a marker file, closed at once
        return make_env("CartPole-v1", hang_at_step=150 if first else 1, sleep_s=0.005)

    slow = functools.partial(make_env, "CartPole-v1", sleep_s=0.005)
    hangs = hangs_again
    with RayCollector(
        [slow, hangs], frames_per_batch=50, total_frames=800, num_collectors=2, sync=False,
        seed=0, worker_stall_timeout_s=2.0, max_restarts=2, batch_timeout_s=120,
    ) as collector:  # fmt: skip
        seen = sum(batch.numel() for batch in collector)
        stats = collector.stats(timeout=5)
    assert seen == 800
    assert 1 <= stats["restarts_per_worker"][1] <= 2 and stats["restarts_per_worker"][0] == 0
    assert stats["workers_hung"] == stats["restarts"]
    assert stats["frames_per_worker"][0] > stats["frames_per_worker"][1]
    _assert_balanced(stats["ledger"], 800)


def _hung_at(caplog, worker_id: int) -> list[float]:
    """When the driver declared ``worker_id`` hung, oldest first (its warnings' times)."""
    prefix = f"collector worker {worker_id} declared hung"
    return [r.created for r in caplog.records if r.getMessage().startswith(prefix)]


@pytest.mark.timeout(180)
def test_a_worker_that_hangs_at_every_rebuild_rests_before_its_next_request(
    ray_clean, tmp_path, caplog
):
    """From its second hang in a row, a rebuilt worker gets no request for a rest that doubles.

    Worker 1's env hangs at the first step of every build and writes when that step began:
    the moment its request reached the env. After its k-th hang in a row (k >= 2) the next
    build's first step comes at least ``worker_stall_timeout_s * 2 ** (k - 2)`` after the hang
    was declared. Without the rest it comes one actor start (a few seconds) after, every time:
    the 4th hang's rest (8 s with a 2 s timeout) is past that.
    """
    stall_s, builds = 2.0, 5
    steps_at = str(tmp_path / "first_steps")

    def hangs_at_every_build() -> object:  # local: Ray ships it by value (tests/ is no package)
        import gymnasium as gym
        from torchrl.envs import GymWrapper

        class HangsAtFirstStep(gym.Wrapper):
            def step(self, action):
                with open(steps_at, "a") as f:
                    f.write(f"{time.time()}\n")
                time.sleep(24 * 3600.0)

        return GymWrapper(HangsAtFirstStep(gym.make("CartPole-v1")))

    def first_steps() -> list[float]:
        if not os.path.exists(steps_at):  # no build has had its request yet
            return []
        with open(steps_at) as f:
            return [float(line) for line in f.read().split()]

    caplog.set_level(logging.WARNING, logger="tdscheme")
    slow = functools.partial(make_env, "CartPole-v1", sleep_s=0.005)
    deadline = time.monotonic() + 120
    with RayCollector(
        [slow, hangs_at_every_build], frames_per_batch=40, num_collectors=2, sync=False, seed=0,
        worker_stall_timeout_s=stall_s, max_restarts=10, batch_timeout_s=120,
    ) as collector:  # fmt: skip
        for _ in collector:  # no frame budget: it ends when the last build had its request
            if len(first_steps()) >= builds or time.monotonic() > deadline:
                break
        stats = collector.stats(timeout=5)
    starts, hung = first_steps(), _hung_at(caplog, 1)
    assert len(starts) >= builds, (starts, hung)
    for k in range(2, len(starts)):  # the k-th hang (hung[k - 1]), then the next build's request
        gap_s = starts[k] - hung[k - 1]
        assert gap_s >= stall_s * 2 ** (k - 2), (k, gap_s, starts, hung)
    assert stats["frames_per_worker"][0] > 0 and stats["frames_per_worker"].get(1, 0) == 0
    assert stats["workers_retired"] == [] and stats["restarts_per_worker"][0] == 0


@pytest.mark.timeout(150)
@pytest.mark.parametrize("sync", [False, True])
def test_a_worker_that_hangs_at_every_build_is_retired_beside_a_healthy_one(
    ray_clean, caplog, sync
):
    """No ``min_workers``: a worker hung past ``max_restarts`` retires, and the run goes on.

    Worker 1's env hangs at the first step of every build (a simulator that never answers
    on its node); worker 0 is healthy. At its second hang (``max_restarts=1``) worker 1 is
    retired, named in one warning and counted in ``stats()``; the run then finishes its
    budget on worker 0.
    """
    caplog.set_level(logging.WARNING, logger="tdscheme")
    hangs = functools.partial(make_env, "CartPole-v1", hang_at_step=1)
    slow = functools.partial(make_env, "CartPole-v1", sleep_s=0.005)
    deadline = time.monotonic() + 100

    def retirements() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.getMessage().startswith("retiring")]

    with RayCollector(
        [slow, hangs], frames_per_batch=40, num_collectors=2, sync=sync, seed=0,
        worker_stall_timeout_s=1.0, max_restarts=1, batch_timeout_s=120,
    ) as collector:  # fmt: skip
        seen, after = 0, 0
        for batch in collector:
            _assert_books_agree(collector)
            seen += batch.numel()
            if after:
                assert (batch[WORKER_ID_KEY] == 0).all()  # the healthy worker alone
            if retirements() and not after:  # 200 frames more, then the run ends
                after = seen + 200
                collector.set_total_frames(after)
            assert time.monotonic() < deadline, "worker 1 was never retired"
        stats = collector.stats(timeout=5)
    assert seen == after
    assert stats["workers_retired"] == [1] and stats["restarts_per_worker"] == [0, 1]
    assert stats["workers_hung"] == 2
    assert stats["frames_per_worker"] == {0: after}
    [warning] = retirements()
    assert "collector worker 1" in warning and "hangs at every rebuild" in warning, warning
    _assert_balanced(stats["ledger"], after)
