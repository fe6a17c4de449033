"""Episode returns are computed one way: the recorded return wins, on every path."""

from __future__ import annotations

import functools

import torch
from tensordict import TensorDict

from tdscheme.episodes import EpisodeStarts, EpisodeTracker, finished_episodes
from tdscheme.gradient_workers.collection import LocalCollection
from tdscheme.keys import ENV_CONFIG_VERSION_KEY, MASK_KEY, TRAJ_IDS_KEY, WORKER_ID_KEY
from tdscheme.presets.actor_critic import train_env
from tdscheme.scheme.metrics import episode_metrics
from tdscheme.testing import mlp_policy


def test_a_scaled_reward_does_not_change_the_logged_return():
    """CartPole pays 1 per step: the logged return is the episode length, whatever the scale.

    The gradient workers' path (LocalCollection) summed the scaled reward while the
    collector path read RewardSum's unscaled return; both now agree.
    """
    env_factory = functools.partial(train_env, "CartPole-v1", num_envs=4, reward_scale=0.1)
    collection = LocalCollection(
        env_factory, mlp_policy(4, 2), num_collectors=1, frames_per_collector=200, seed=0
    )
    try:
        batch, returns = collection.collect()
    finally:
        collection.shutdown()
    done = batch["next", "done"].squeeze(-1)
    lengths = batch["next", "step_count"].squeeze(-1)[done].double().tolist()
    assert returns and sorted(returns) == sorted(lengths)
    assert batch["next", "reward"].max().item() < 0.5  # the learner does see scaled rewards
    metrics = episode_metrics(batch)
    assert metrics["train/episode_return"] == metrics["train/episode_length"]


def test_tracker_sums_rewards_when_the_env_records_no_return():
    tracker = EpisodeTracker()
    batch = TensorDict(
        {"next": {"reward": torch.full((2, 3, 1), 0.5), "done": torch.tensor(
            [[[False], [False], [True]], [[False], [True], [False]]])}},
        [2, 3],
    )  # fmt: skip
    assert finished_episodes(batch) is None
    assert sorted(tracker.update(batch)) == [1.0, 1.5]


def _frames(worker, traj, version, done, mask=None) -> TensorDict:
    fields = {
        WORKER_ID_KEY: torch.tensor(worker), TRAJ_IDS_KEY: torch.tensor(traj),
        ENV_CONFIG_VERSION_KEY: torch.tensor(version),
        ("next", "done"): torch.tensor(done).unsqueeze(-1),
        ("next", "episode_reward"): torch.ones(len(traj), 1),
    }  # fmt: skip
    if mask is not None:
        fields[MASK_KEY] = torch.tensor(mask)
    return TensorDict(fields, [len(traj)])


def test_episode_starts_keep_each_workers_trajectories_apart_across_batches():
    starts = EpisodeStarts()
    # workers 0 and 1 both run a trajectory 7; worker 1's started at version 2, worker 0's at 1
    first = _frames([0, 1], [7, 7], [1, 2], [False, False])
    assert finished_episodes(first, starts).versions == []
    # a masked frame (a NEXT_STEP reset step) of version 0 is no step of either episode
    later = _frames([0, 1, 0], [7, 7, 7], [3, 3, 0], [True, True, False], mask=[True, True, False])
    assert finished_episodes(later, starts).versions == [1, 2]
    assert finished_episodes(later).versions == [3, 3]  # without: the version at the end
    # frames without trajectory ids: the version at the end
    bare = _frames([0], [7], [5], [True]).exclude(TRAJ_IDS_KEY)
    assert finished_episodes(bare, starts).versions == [5]
