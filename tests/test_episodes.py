"""Episode returns are computed one way: the recorded return wins, on every path."""

from __future__ import annotations

import functools

import torch
from tensordict import TensorDict

from tdscheme.episodes import EpisodeTracker, finished_episodes
from tdscheme.gradient_workers.collection import LocalCollection
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
