"""RayCollector with a Ray-held torchrl replay buffer: workers write, the driver counts.

Real Ray (the session's), real CartPole envs, torchrl's own RayReplayBuffer.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time

import pytest
import ray
import torch
from tensordict import TensorDict
from torchrl.data import LazyTensorStorage, ReplayBuffer, SliceSampler, TensorDictReplayBuffer
from torchrl.data.replay_buffers.ray_buffer import RayReplayBuffer

from tdscheme import RayCollector
from tdscheme.collectors.settings.specs import WorkerBatch
from tdscheme.keys import POLICY_VERSION_KEY, WORKER_ID_KEY
from tdscheme.presets import get_preset
from tdscheme.replay import ray_buffer_kwargs
from tdscheme.replay.bounded import BoundedRayBuffer
from tdscheme.replay.ray_held import BufferWriter, last_write
from tdscheme.testing import make_env, mlp_policy

SMALL = {"remote_configs": {"num_cpus": 0.5}}
env = functools.partial(make_env, "CartPole-v1")


@pytest.fixture
def buffer(ray_clean):
    rb = RayReplayBuffer(
        storage=functools.partial(LazyTensorStorage, 20_000),
        batch_size=32,
        remote_config={"num_cpus": 0},
    )
    yield rb
    rb.shutdown()


def written(rb) -> int:
    return rb.write_count


def test_iteration_yields_none_and_writes_exactly_total_frames(buffer):
    """700 frames asked, 300 per batch: the last request's budget is 100, never more."""
    with RayCollector(
        env, mlp_policy(4, 2), frames_per_batch=300, total_frames=700, num_collectors=2,
        replay_buffer=buffer, **SMALL,
    ) as collector:  # fmt: skip
        batches = list(collector)
        assert collector._closed  # iterating to the end shuts the workers down, as torchrl's
    assert all(batch is None for batch in batches)
    assert written(buffer) == len(buffer) == 700
    data = buffer[:]
    assert set(data[WORKER_ID_KEY].unique().tolist()) <= {0, 1}
    assert (data[POLICY_VERSION_KEY] == 0).all()


def test_start_collects_in_the_background_pause_drains_and_hold_while_paces(buffer):
    """start(): collection in the background; pause() drains it; hold_while paces it.

    With ``hold_while`` (no new request while the consumer has enough), first left open
    (the consumer took everything), then holding, through a pause that keeps it.
    """
    taken = 10**9  # what a learner took so far: at first, more than is written

    def consumer_busy():
        return collector.collected_frames - taken >= 200

    collector = RayCollector(
        env, mlp_policy(4, 2), frames_per_batch=100, total_frames=-1, num_collectors=2,
        replay_buffer=buffer, **SMALL,
    )  # fmt: skip

    def assert_held():
        """Frames counted up to the bound (+ a batch per worker), then only the requests in
        flight (2 per worker of 50 frames), and then nothing more."""
        held = written(buffer)
        time.sleep(1.0)
        assert written(buffer) == held
        assert 200 <= collector.collected_frames - taken <= 200 + 2 * 50
        assert held - collector.collected_frames <= 2 * 2 * 50

    try:
        collector.start(hold_while=consumer_busy)
        assert collector.is_running
        with pytest.raises(RuntimeError, match=r"in the background .*collector.pause\(\)"):
            iter(collector)  # one flow, two drivers: refused, and collection goes on
        _wait_for(lambda: written(buffer) >= 400)
        with collector.pause():
            frozen = written(buffer)
            assert not collector.is_running
            stats = collector.stats()
            assert stats["frames"] == frozen  # every in-flight write is counted
            assert stats["ledger"]["balanced"] and stats["ledger"]["yielded"] == frozen
            assert stats["ledger"]["in_flight"] == 0 and not collector._flow.requests.asked()
            time.sleep(1.0)  # time passes inside the block: nothing is written
            assert written(buffer) == frozen
        _wait_for(lambda: written(buffer) > frozen)  # collection resumed
        collector.update_policy_weights_()  # pushes reach background workers too
        _wait_for(lambda: (buffer[-50:][POLICY_VERSION_KEY] == 1).all().item())
        # the consumer now has taken all it was given: the workers hold at 200 frames ahead
        taken = collector.collected_frames
        _wait_for(lambda: collector.collected_frames >= taken + 200)
        time.sleep(2.0)  # unpaced, 2 CartPole workers write thousands of frames in 2 s
        assert_held()
        taken += 1_000  # the consumer took its frames: the workers go on
        _wait_for(lambda: collector.collected_frames >= taken + 200)
        time.sleep(1.0)
        assert_held()
        with collector.pause():
            taken = collector.collected_frames  # the drained requests, counted
        time.sleep(2.0)
        assert_held()  # resumed with the same hold
        start = time.monotonic()
    finally:
        asyncio.run(collector.async_shutdown())  # a held thread stops at once
    assert time.monotonic() - start < 30.0 and not collector.is_running


def test_background_collection_stops_at_total_frames_and_reports_its_episodes_once(buffer):
    """The driver never sees the frames; the workers report the episodes that end in them."""
    # CartPole recording its episodes (torchrl's RewardSum and StepCounter), a preset's env
    recording_env = get_preset("ppo-cartpole").override({"num_envs": 1}).factories()["env_factory"]
    with RayCollector(
        recording_env, mlp_policy(4, 2), frames_per_batch=128, total_frames=1000,
        num_collectors=2, replay_buffer=buffer, **SMALL,
    ) as collector:  # fmt: skip
        collector.start()
        _wait_for(lambda: not collector.is_running)
        stats = collector.stats(timeout=5)
        assert stats["frames"] == written(buffer) == 1000
        assert stats["completed"] and stats["total_frames"] == 1000
        assert stats["workers_alive"] == 2 and stats["worker_frames"] == 1000
        episodes = collector.written_episodes()
        assert collector.written_episodes().returns == []  # each is reported once
    data = buffer[:]
    done = data["next", "done"].squeeze(-1)
    assert len(episodes.returns) == int(done.sum()) > 10
    # the same episodes as the buffer's done frames hold (the workers' order differs)
    assert sorted(episodes.returns) == sorted(
        data["next", "episode_reward"][done].squeeze(-1).tolist()
    )
    assert sorted(episodes.lengths) == sorted(data["next", "step_count"][done].squeeze(-1).tolist())


def test_a_buffer_that_flattens_its_writes_takes_them_as_frames():
    """Ape-X's shards flatten [num_envs, time] writes: no "each env row is one item" warning,
    and a budget cut goes along time, as for a storage of ndim=2."""
    from tdscheme.replay.ray_held import _storage_ndim
    from tdscheme.replay.shard import FrameReplayBuffer

    assert _storage_ndim(FrameReplayBuffer(storage=LazyTensorStorage(10))) == 2
    assert _storage_ndim(TensorDictReplayBuffer(storage=LazyTensorStorage(10))) == 1
    assert _storage_ndim(TensorDictReplayBuffer(storage=LazyTensorStorage(10, ndim=2))) == 2


def test_a_ray_held_buffer_sampled_by_rank_shares_stays_quiet(ray_clean):
    """Learner ranks sample batch_size / ranks; torchrl's warning of it (once a buffer) stays
    in the actor: a fresh buffer's first such sample warns only where filters are reset."""

    def sample_share(rb) -> list[list[str]]:  # in the actor (pickled by value)
        import warnings

        told = []
        fresh = type(rb)(storage=LazyTensorStorage(16), batch_size=8)  # its class, unsampled
        fresh.extend(TensorDict({"x": torch.arange(16.0)}, [16]))
        for buffer, always in ((rb, False), (fresh, True)):
            with warnings.catch_warnings(record=True) as caught:
                if always:  # the negative control: torchrl does warn
                    warnings.simplefilter("always")
                buffer.sample(4)  # half the batch size: a rank's share
            told.append([str(w.message) for w in caught])
        return told

    rb = RayReplayBuffer(
        storage=functools.partial(LazyTensorStorage, 16), batch_size=8, **ray_buffer_kwargs()
    )
    try:
        rb.extend(TensorDict({"x": torch.arange(16.0)}, [16]))
        told = ray.get(rb._rb.__ray_call__.remote(sample_share), timeout=60)
    finally:
        rb.shutdown()
    assert told[0] == [] and any("conflicting batch_sizes" in m for m in told[1]), told


def test_trajs_per_batch_writes_only_whole_trajectories(ray_clean):
    rb = RayReplayBuffer(
        storage=functools.partial(LazyTensorStorage, 10_000),
        sampler=functools.partial(SliceSampler, slice_len=8, end_key=("next", "done")),
        batch_size=32,
        remote_config={"num_cpus": 0},
    )
    try:
        with RayCollector(
            env, mlp_policy(4, 2), frames_per_batch=64, total_frames=600, num_collectors=2,
            replay_buffer=rb, trajs_per_batch=2, **SMALL,
        ) as collector:  # fmt: skip
            for _ in collector:
                pass
            stats = collector.stats()
        data = rb[:]
        assert 0 < len(data) <= 600
        assert data["next", "done"][-1].item()  # the last written frame ends a trajectory
        # Every trajectory is whole and contiguous: one done, at its last frame.
        keys = torch.stack([data[WORKER_ID_KEY], data["collector", "traj_ids"]], -1)
        for key in keys.unique(dim=0):
            where = (keys == key).all(-1).nonzero().flatten()
            assert (where.diff() == 1).all()
            done = data["next", "done"][where].flatten()
            assert done[-1] and done.sum().item() == 1
        assert stats["frames"] == len(data)
        # It ends at the first whole trajectory that does not fit in what is left.
        assert stats["frames"] == 600 or stats["frames_discarded"] > 0
        ledger = stats["ledger"]  # each batch's ask restated to what its worker stepped
        assert ledger["balanced"] and ledger["in_flight"] == 0, ledger
        assert ledger["yielded"] == stats["frames"]
        sample = rb.sample()
        assert sample.shape == torch.Size([32])
    finally:
        rb.shutdown()


@pytest.mark.fast
def test_bad_buffer_arguments_are_clear_errors(ray_session):
    plain = ReplayBuffer(storage=LazyTensorStorage(100))
    with pytest.raises(TypeError, match="replay_buffer=ReplayBuffer.* service_backend='ray'"):
        RayCollector(env, frames_per_batch=10, replay_buffer=plain, trajs_per_batch=2)
    with pytest.raises(ValueError, match="trajs_per_batch=0 is invalid"):
        RayCollector(env, frames_per_batch=10, trajs_per_batch=0)


def _wait_for(condition, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def test_batched_envs_keep_torchrl_layout_and_stop_short_of_total(buffer):
    """4 envs x 16 steps per batch: rows of 16 steps, as torchrl writes; 150 frames fit 9 rows."""
    batched = functools.partial(make_env, "CartPole-v1", num_envs=4)
    with RayCollector(
        batched, mlp_policy(4, 2), frames_per_batch=64, total_frames=150, num_collectors=1,
        replay_buffer=buffer, **SMALL,
    ) as collector:  # fmt: skip
        for _ in collector:
            pass
        stats = collector.stats()
    rows = buffer[:]
    assert rows.shape == torch.Size([9, 16])  # 144 frames: never past 150, whole rows only
    assert stats["frames"] == 144 and stats["frames_discarded"] > 0
    assert stats["ledger"]["balanced"] and stats["ledger"]["yielded"] == 144, stats["ledger"]


@pytest.mark.parametrize("transport", ["ray", "distributed"])
def test_batched_envs_into_an_ndim2_storage_are_cut_along_time(ray_clean, transport):
    """torchrl's ndim=2 storage keeps the env dim: the last write is cut to whole env steps.

    Before, the last write was cut to whole env rows ([1, 16] of a [4, 16] batch), which an
    ndim=2 storage refuses, and background collection stopped on a WorkerError. The
    storage's ndim is read from the buffer's actor with either of torchrl's transports
    (the "distributed" one was once assumed to be 1).
    """
    rb = RayReplayBuffer(
        storage=functools.partial(LazyTensorStorage, 10_000, ndim=2), batch_size=32,
        remote_config={"num_cpus": 0}, transport=transport,
    )  # fmt: skip
    batched = functools.partial(make_env, "CartPole-v1", num_envs=4)
    try:
        with RayCollector(
            batched, mlp_policy(4, 2), frames_per_batch=64, total_frames=150, num_collectors=1,
            replay_buffer=rb, **SMALL,
        ) as collector:  # fmt: skip
            collector.start()
            _wait_for(lambda: not collector.is_running)
            stats = collector.stats(timeout=10)
        assert len(rb) == stats["frames"] == 148, stats  # 150 - 2: whole steps of 4 envs
        assert written(rb) == 37  # an ndim=2 storage counts env steps: 16 + 16 + 5
        ledger = stats["ledger"]
        assert ledger["balanced"] and ledger["short"] == 2 and "env rows" in ledger["short_reason"]
        bounded = BoundedRayBuffer(rb, timeout_s=30.0)  # either transport: through the actor
        assert bounded[:].batch_size == torch.Size([4, 37])  # the env dim kept
        assert bounded.sample().batch_size == torch.Size([32]) and len(bounded) == 148
    finally:
        rb.shutdown()


def _assert_whole_trajectories(data) -> None:
    """Per worker, in write order, a trajectory id only changes after a done frame.

    Holds across restarts too: a new actor numbers its trajectories from 0
    again, but its first frame follows the last frame its predecessor wrote.
    """
    workers = data[WORKER_ID_KEY].flatten()
    for worker_id in workers.unique().tolist():
        mine = data[workers == worker_id]
        done = mine["next", "done"].flatten()
        traj = mine["collector", "traj_ids"].flatten()
        changes = (traj.diff() != 0).nonzero().flatten()
        assert done[changes].all(), f"worker {worker_id}: a trajectory was cut"
        assert done[-1], f"worker {worker_id}: its last trajectory is not whole"


def _assert_no_trajectory_spliced(data) -> None:
    """Each worker's frames of one trajectory id are one block, in the buffer's write order."""
    for worker_id in data[WORKER_ID_KEY].unique().tolist():
        ids = data[data[WORKER_ID_KEY] == worker_id]["collector", "traj_ids"].flatten()
        for traj in ids.unique().tolist():
            where = (ids == traj).nonzero().flatten()
            assert where[-1] - where[0] + 1 == where.numel(), (
                f"worker {worker_id}: trajectory id {traj} written in separate pieces "
                f"(a restarted worker reused it?)"
            )


@pytest.mark.parametrize("trajs_per_batch", [None, 2])
def test_worker_killed_while_writing_is_restarted_and_counted(ray_clean, trajs_per_batch):
    """A worker killed in background collection: nothing half-written, every frame accounted."""
    rb = RayReplayBuffer(
        storage=functools.partial(LazyTensorStorage, 20_000),
        batch_size=32,
        remote_config={"num_cpus": 0},
    )
    # far past the kill at 300 frames: the survivor alone cannot finish the run before the
    # driver has met the death (a run that ends first discards the dead worker's request)
    total = 10_000
    try:
        with RayCollector(
            env, mlp_policy(4, 2), frames_per_batch=100, total_frames=total, num_collectors=2,
            replay_buffer=rb, trajs_per_batch=trajs_per_batch, max_restarts=2, **SMALL,
        ) as collector:  # fmt: skip
            collector.start()
            _wait_for(lambda: written(rb) >= 300)
            ray.kill(collector.workers[0], no_restart=True)
            _wait_for(lambda: not collector.is_running)
            # the rebuilt worker may still be importing torch when the survivor ends the run
            _wait_for(lambda: collector.stats(timeout=10)["workers_alive"] == 2)
            stats = collector.stats(timeout=10)
        assert stats["restarts"] == 1 and stats["workers_alive"] == 2, stats
        # the killed worker's request in flight: lost, or (when the kill fell between its
        # write landing and its reply) counted as written by a dead worker, never both
        assert stats["frames_lost"] + stats["frames_written_by_dead_workers"] > 0, stats
        assert stats["frames"] == written(rb) == len(rb), stats  # written is what was counted
        ledger = stats["ledger"]
        assert ledger["balanced"] and ledger["yielded"] == stats["frames"], stats
        assert ledger["lost"] == stats["frames_lost"], stats
        assert ledger["in_flight"] == 0 and not collector._flow.requests.asked(), stats
        _assert_no_trajectory_spliced(rb[:])  # the rebuilt worker's ids are new ones
        if trajs_per_batch is None:
            assert written(rb) == total, stats  # the lost request was asked again, never past
        else:
            assert written(rb) <= total
            _assert_whole_trajectories(rb[:])
    finally:
        rb.shutdown()


def test_whole_trajectories_in_the_background_reach_total_frames_through_a_kill(buffer):
    """Pendulum's 200-step trajectories, 2 per batch: exactly total_frames, a worker killed.

    Before, the two requests in flight each got half of what was left, so near the end
    no share held a whole trajectory and the run asked (and discarded) forever, short of
    ``total_frames``.
    """
    from torchrl.envs.utils import RandomPolicy

    pendulum = functools.partial(make_env, "Pendulum-v1")
    rb = buffer
    with RayCollector(
        pendulum, RandomPolicy(pendulum().action_spec), frames_per_batch=50,
        total_frames=3000, num_collectors=2, replay_buffer=rb, trajs_per_batch=2,
        sync=False, **SMALL,
    ) as collector:  # fmt: skip
        collector.start()
        _wait_for(lambda: written(rb) >= 200)
        ray.kill(collector.workers[0], no_restart=True)
        _wait_for(lambda: not collector.is_running)
        stats = collector.stats(timeout=10)
    assert written(rb) == 3000 and stats["completed"], stats
    assert stats["ledger"]["balanced"] and stats["ledger"]["short"] == 0, stats["ledger"]
    _assert_whole_trajectories(rb[:])


def test_max_policy_lag_applies_to_background_writes(buffer):
    """Lag 0: once every worker acknowledged version v, no frame older than v is written."""
    # 2 ms per step: the worker is nearly always mid-batch, so a push meets batches in flight
    # (with CartPole's ~20 us steps it could fall between two batches, and nothing be dropped);
    # "nearly": a loaded machine can stretch the gaps, so up to 5 pushes until one drops a batch
    slow = functools.partial(make_env, "CartPole-v1", sleep_s=0.002)
    acked: list[tuple[int, int]] = []  # (frames written once version v was acknowledged, v)
    with RayCollector(
        slow, mlp_policy(4, 2), frames_per_batch=200, total_frames=-1, num_collectors=1,
        replay_buffer=buffer, max_policy_lag=0, **SMALL,
    ) as collector:  # fmt: skip
        collector.start()
        _wait_for(lambda: written(buffer) >= 400)
        for version in range(1, 6):
            collector.update_policy_weights_()
            assert collector.wait_for_weights(timeout_s=60) == [version]
            acked.append((written(buffer), version))
            _wait_for(lambda: written(buffer) >= acked[-1][0] + 400)
            if collector.stats(timeout=10)["frames_dropped"] > 0:
                break
        with collector.pause():
            stats = collector.stats(timeout=10)
            data = buffer[:]
    versions = data[POLICY_VERSION_KEY].flatten()
    for acked_at, version in acked:
        assert (versions[acked_at:] >= version).all(), (version, versions[acked_at:].unique())
    # the batches in flight at a push ran the older version and were dropped, not written
    assert stats["frames_dropped"] > 0, f"no batch was in flight at any of {len(acked)} pushes"
    assert stats["frames"] == len(data)


@pytest.mark.fast
def test_buffer_writer_writes_exactly_what_extend_writes(buffer):
    """The codec path (decoded in the buffer's actor) stores the same frames as client.extend."""
    td = TensorDict(
        {
            "observation": torch.randn(6, 4),
            "action": torch.nn.functional.one_hot(torch.arange(6) % 2, 2).bool(),
            "next": {
                "reward": torch.ones(6, 1, dtype=torch.float64),
                "done": torch.zeros(6, 1, dtype=torch.bool),
            },
            "collector": {"traj_ids": torch.arange(6), "policy_version": torch.full((6,), 3)},
        },
        [6],
    )
    writer = BufferWriter(buffer.client())
    assert writer._actor is not None  # torchrl's default "ray" transport: the codec path
    assert last_write(buffer, 3) is None
    record = WorkerBatch(3, 7, 0, 6, False, None, 0.0, 0.0)
    writer.extend(td, record=record)
    # the reply lands with the write: a worker that dies before replying is found here
    assert last_write(buffer, 3) == record and last_write(buffer, 0) is None
    buffer.client().extend(td)
    assert written(buffer) == 12
    stored = buffer[:]
    for key in td.keys(True, True):
        assert stored[key].dtype == td[key].dtype, key
        assert torch.equal(stored[key][:6], td[key]) and torch.equal(stored[key][6:], td[key]), key


def test_written_episodes_kept_for_a_loop_that_never_takes_them_are_bounded():
    from tdscheme.collectors.driver.stats import KEPT_EPISODES, CollectorStats

    stats = CollectorStats()
    stats.written_episodes.extend((float(i), 1.0) for i in range(KEPT_EPISODES + 5))
    taken = stats.take_written_episodes()
    assert len(taken.returns) == KEPT_EPISODES and taken.returns[0] == 5.0  # the newest kept


def test_background_writes_into_a_prioritized_buffer_come_in_at_the_max_priority(ray_clean):
    """A worker writes in the background while the driver samples by priority and writes
    priorities back; the buffer's actor (ray_buffer_kwargs) holds the class asked."""
    import numpy as np

    from tdscheme.replay.prioritized import prioritized_sampler

    alpha, frames = 0.5, 1000
    rb = RayReplayBuffer(
        storage=functools.partial(LazyTensorStorage, 2000),
        sampler=functools.partial(prioritized_sampler, 2000, alpha, 0.4),
        batch_size=32, **ray_buffer_kwargs(TensorDictReplayBuffer),
    )  # fmt: skip
    buffer = BoundedRayBuffer(rb, timeout_s=60.0)
    try:
        with RayCollector(
            env, mlp_policy(4, 2), frames_per_batch=100, total_frames=frames,
            num_collectors=1, replay_buffer=rb, **SMALL,
        ) as collector:  # fmt: skip
            # the writers wait after their first batches until the update is in: without it,
            # the 1,000 frames could all land before the driver's sample (a race, not a check)
            updated = threading.Event()
            collector.start(hold_while=lambda: not updated.is_set())
            _wait_for(lambda: written(rb) >= 100)
            sample = buffer.sample()
            assert sample["observation"].shape == (32, 4)
            sample["td_error"] = torch.full((32,), 100.0)  # the new max priority
            before = written(rb)
            buffer.update_tensordict_priority(sample)
            after = written(rb)  # the actor runs one call at a time: writes are before or after
            updated.set()
            _wait_for(lambda: not collector.is_running)
            assert collector.stats(timeout=5)["frames"] == written(rb) == frames
        assert buffer.prioritized and len(rb) == frames
        # ray_buffer_kwargs: an actor of the class asked, whose repr (Ray's prefix to the
        # actor's output) is one line: torchrl's spans ten
        shown = ray.get(rb._rb.__ray_call__.remote(repr), timeout=30)
        assert shown == "TensorDictReplayBuffer(LazyTensorStorage, batch_size=32)"

        def read(held):
            return np.asarray(held.sampler._sum_tree[np.arange(frames)], dtype=np.float64)

        leaves = ray.get(rb._rb.__ray_call__.remote(read), timeout=60)
        top = 100.0**alpha
        assert np.isclose(leaves[sample["index"].numpy()], top, rtol=1e-5).all()
        # every frame written after the update came in at the max priority (100 ** alpha)
        assert after < frames and np.isclose(leaves[after:], top, rtol=1e-5).all()
        assert np.isclose(leaves[:before], 1.0).sum() >= before - 32  # the rest: 1 ** alpha
    finally:
        buffer.shutdown()
