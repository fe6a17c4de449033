"""ShardedReplayBuffer: K prioritized Ray-held shards sampled as one buffer; workers' own priorities.

Real Ray (the session's), torchrl's RayReplayBuffer shards, real CartPole workers.
"""

from __future__ import annotations

import functools
import os
import signal
import time

import numpy as np
import pytest
import ray
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictSequential
from torchrl.modules import QValueModule

from tdscheme import RayCollector
from tdscheme.errors import ReplayBufferDied
from tdscheme.replay.priorities import QLearningPriority
from tdscheme.replay.sharded import SHARD_KEY, ShardedReplayBuffer
from tdscheme.testing import make_env

#: chi-square's 0.999 quantile with 7 degrees of freedom (8 cells), from the standard tables
CHI2_999_DF7 = 24.322


def frames(values: list[float]) -> TensorDict:
    n = len(values)
    return TensorDict({"obs": torch.arange(float(n)), "td_error": torch.tensor(values)}, [n])


def leaves(shard, count: int) -> np.ndarray:
    def read(rb):
        return np.asarray(rb.sampler._sum_tree[np.arange(count)], dtype=np.float64)

    return ray.get(shard._rb.__ray_call__.remote(read), timeout=60)


def test_samples_and_weights_are_those_of_one_buffer_of_all_frames(ray_session):
    alpha, beta = 0.7, 0.5
    # 3 frames in shard 0, 5 in shard 1, priorities from the writes (no max-priority start)
    priority = [[0.5, 2.0, 1.0], [4.0, 0.1, 3.0, 1.5, 0.8]]
    with ShardedReplayBuffer(num_shards=2, frames_per_shard=16, batch_size=2000, alpha=alpha,
                             beta=beta, seed=0, timeout_s=60) as buffer:  # fmt: skip
        for shard, values in zip(buffer.shards, priority, strict=True):
            shard.extend(frames(values))
        assert len(buffer) == 8 and buffer.write_counts() == [3, 5]
        counts = np.zeros(8)
        for _ in range(5):
            sample = buffer.sample()
            cell = sample[SHARD_KEY] * 3 + sample["index"]  # shard 0: cells 0-2, shard 1: 3-7
            counts += np.bincount(cell.numpy(), minlength=8)
        p = np.array(priority[0] + priority[1]) ** alpha
        expected = p / p.sum()
        chi2 = float(((counts - expected * counts.sum()) ** 2 / (expected * counts.sum())).sum())
        assert chi2 < CHI2_999_DF7, (counts, expected * counts.sum())
        uniform_chi2 = float(((counts - counts.sum() / 8) ** 2 / (counts.sum() / 8)).sum())
        assert uniform_chi2 > 10 * CHI2_999_DF7  # the negative control: far from uniform
        # weights over the whole buffer: (N P(i)) ** -beta over the max (the lowest priority's)
        weight = (8 * expected) ** -beta / (8 * expected.min()) ** -beta
        cell = (sample[SHARD_KEY] * 3 + sample["index"]).numpy()
        np.testing.assert_allclose(sample["priority_weight"].numpy(), weight[cell], rtol=1e-5)


@pytest.mark.fast
def test_priorities_go_back_to_their_shard_and_stale_ones_are_dropped_and_counted(ray_session):
    with ShardedReplayBuffer(num_shards=2, frames_per_shard=4, batch_size=8, alpha=1.0,
                             beta=1.0, seed=1, timeout_s=60) as buffer:  # fmt: skip
        for shard in buffer.shards:
            shard.extend(frames([1.0] * 4))
        sample = buffer.sample()
        sample["td_error"] = torch.full((8,), 9.0)
        buffer.update_tensordict_priority(sample)
        buffer.flush()
        for k, shard in enumerate(buffer.shards):
            mine = sample["index"][sample[SHARD_KEY] == k].unique().numpy()
            got = leaves(shard, 4)
            assert np.allclose(got[mine], 9.0) and np.allclose(np.delete(got, mine), 1.0)
        # shard 0 is written over (4 new frames in its 4 slots) before the next update lands
        stale = buffer.sample()
        buffer.shards[0].extend(frames([2.0] * 4))
        stale["td_error"] = torch.full((8,), 50.0)
        buffer.update_tensordict_priority(stale)
        stats = buffer.stats()
        from_shard_0 = int((stale[SHARD_KEY] == 0).sum())
        assert stats["stale_updates_dropped"] == from_shard_0 > 0
        assert np.allclose(leaves(buffer.shards[0], 4), 2.0)  # the new frames' own priorities
        assert stats["writes_per_shard"] == [8, 4] and stats["priority_updates"] >= 2


def q_policy() -> TensorDictSequential:
    torch.manual_seed(0)
    q = TensorDictModule(torch.nn.Linear(4, 2), ["observation"], ["action_value"])
    return TensorDictSequential(q, QValueModule(action_space="one-hot"))


def test_workers_write_to_their_shards_with_their_own_td_errors(ray_clean):
    """Two CartPole workers, two shards: each writes its frames, with its own priorities, into one shard."""
    with ShardedReplayBuffer(num_shards=2, frames_per_shard=1000, batch_size=64,
                             timeout_s=60) as buffer:  # fmt: skip
        with RayCollector(
            functools.partial(make_env, "CartPole-v1"), q_policy(), frames_per_batch=200,
            total_frames=800, num_collectors=2, replay_buffer=buffer,
            replay_priority_fn=QLearningPriority(gamma=0.9),
            remote_configs={"num_cpus": 0.5},
        ) as collector:  # fmt: skip
            for _ in collector:
                pass
            stats = collector.stats(workers="both")
        assert stats["frames"] == buffer.write_count == 800
        assert stats["ledger"]["balanced"]
        by_shard = buffer.stats()["writes_per_shard"]
        by_worker = [stats[f"worker_{w}/frames"] for w in (0, 1)]
        assert by_shard == by_worker and sum(by_shard) == 800 and min(by_shard) > 0
        # every frame holds the TD error its worker computed (weights never pushed: the
        # policy sent), none the max priority (1.0); the priorities are not stored as data
        for k, shard in enumerate(buffer.shards):
            data = shard[: by_shard[k]]
            assert "td_error" not in data.keys()
            p = leaves(shard, by_shard[k])
            expected = (QLearningPriority(gamma=0.9)(data, q_policy()).double() + 1e-8) ** 0.6
            np.testing.assert_allclose(p, expected.numpy(), rtol=1e-5)
            # TD errors here lie near 1: only a frame whose own priority is not 1 tells
            away = ~np.isclose(expected.numpy(), 1.0, rtol=1e-3)
            assert away.sum() > len(p) // 2 and not np.isclose(p[away], 1.0).any()
        sample = buffer.sample()
        assert set(sample[SHARD_KEY].tolist()) == {0, 1}


def shard_pid(shard) -> int:
    return ray.get(shard._rb.__ray_call__.remote(lambda rb: os.getpid()), timeout=60)


def test_a_shard_killed_mid_run_is_restarted_empty_and_the_run_reaches_its_budget(ray_clean, caplog):
    """SIGKILL one shard's process while two workers write and a learner samples: the run goes on."""
    total = 4000
    with ShardedReplayBuffer(num_shards=2, frames_per_shard=5000, batch_size=32,
                             timeout_s=60) as buffer:  # fmt: skip
        with RayCollector(
            functools.partial(make_env, "CartPole-v1"), q_policy(), frames_per_batch=100,
            total_frames=total, num_collectors=2, replay_buffer=buffer,
            replay_priority_fn=QLearningPriority(gamma=0.9), remote_configs={"num_cpus": 0.5},
        ) as collector:  # fmt: skip
            collector.start()
            deadline = time.monotonic() + 120
            while buffer.write_count < 800 and time.monotonic() < deadline:
                if len(buffer) >= 200:
                    buffer.sample()  # a learner's draws, its last look at each shard's counts
                time.sleep(0.01)
            in_shard_1 = buffer.stats()["writes_per_shard"][1]
            os.kill(shard_pid(buffer.shards[1]), signal.SIGKILL)  # as a lost machine would
            while collector.is_running:
                sample = buffer.sample()
                sample["td_error"] = torch.rand(32)
                buffer.update_tensordict_priority(sample)
            stats = collector.stats(timeout=30)
        assert stats["frames"] == total and stats["ledger"]["balanced"], stats["ledger"]
        after = buffer.stats()
        # counted: what shard 1 held at the last look (at least what it held before the kill),
        # at most what it lost (writes may land between the last look and the kill)
        assert after["shard_restarts"] == 1 and 0 < in_shard_1 <= after["frames_lost"]
        assert after["frames_lost"] <= total - sum(after["writes_per_shard"]), after
        assert after["writes_per_shard"][1] > 0  # the restarted shard took writes again
        drawn = torch.cat([buffer.sample(256)[SHARD_KEY] for _ in range(8)])  # fresh draws
        assert set(drawn.tolist()) == {0, 1}  # and is sampled again
    warnings = [r for r in caplog.records if "replay shard 1 of 2 died and was restarted" in r.message]
    assert len(warnings) == 1


def test_a_killed_shard_without_restarts_is_named_not_waited_on(ray_clean):
    buffer = ShardedReplayBuffer(
        num_shards=2, frames_per_shard=8, batch_size=4, timeout_s=30, max_restarts=0
    )
    try:
        for shard in buffer.shards:
            shard.extend(frames([1.0] * 4))
        os.kill(shard_pid(buffer.shards[1]), signal.SIGKILL)
        with pytest.raises(ReplayBufferDied, match=r"replay shard 1 of 2 died .*max_restarts"):
            buffer.sample()
    finally:
        buffer.shutdown()
