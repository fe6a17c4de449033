"""OnPolicyLoop: the on-policy way to train: collect on Ray workers, learn on the driver, push.

One of the Scheme's training loops (see :mod:`tdscheme.scheme.scheme`): each step takes
one batch from a :class:`~tdscheme.RayCollector` whose workers run the learner's
policy, trains the :class:`~tdscheme.learner.Learner` on it and pushes fresh
weights every ``weight_push_interval`` updates.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar

from tensordict import TensorDictBase

from tdscheme.collectors import RayCollector
from tdscheme.episodes import EpisodeStarts, FinishedEpisodes, finished_episodes
from tdscheme.learner import Learner
from tdscheme.learner.group import LearnerGroup
from tdscheme.learner.snapshots import cpu_module
from tdscheme.scheme.config import SchemeConfig
from tdscheme.scheme.loop import CollectorEnvConfigs, NoReplayBuffer, PushInterval
from tdscheme.scheme.metrics import finished_metrics, lag_metrics, numeric_stats

__all__ = ["OnPolicyLoop"]


class OnPolicyLoop(NoReplayBuffer, CollectorEnvConfigs):
    """Collect -> learn -> push with a driver-side RayCollector.

    A :class:`~tdscheme.scheme.loop.TrainingLoop` without a coordinator or a replay buffer.

    Args:
        config: the Scheme's settings (``num_grad_workers == 0``).
        env_factory: builds one collector worker's env.
        learner: the driver's Learner, or a learner group (``num_learners > 0``) over
            it; its ``policy`` runs in the workers.

    Raises:
        ValueError: ``config.async_learner`` is not this loop's (the AsyncLoop's is True).
    """

    #: The key of this loop's part of ``Scheme.state_dict()``.
    state_key = "collector"
    #: The ``config.async_learner`` this loop runs (the Scheme picks the loop by it).
    async_learner: ClassVar[bool] = False
    collector: RayCollector
    coordinator: None = None
    episodes: FinishedEpisodes | None = None  # those that ended in the last step

    def __init__(
        self,
        config: SchemeConfig,
        *,
        env_factory: Callable[[], Any],
        learner: Learner | LearnerGroup,
    ) -> None:
        if config.async_learner != self.async_learner:
            raise ValueError(
                f"config.async_learner={config.async_learner} is invalid for a "
                f"{type(self).__name__}; accepted: {self.async_learner} (a Scheme picks the "
                f"AsyncLoop for True, the OnPolicyLoop for False)"
            )
        self.config = config
        self.learner = learner
        self.collector = RayCollector.from_config(
            config.collector_config(env_factory, cpu_module(learner.policy))
        )
        self._batches: Iterator[TensorDictBase] | None = None
        self._push = PushInterval(config.weight_push_interval)
        self._episode_starts = EpisodeStarts()  # each episode counted at its start's config

    def step(self) -> tuple[int, dict[str, float]]:
        """Waits for a batch, trains on it, pushes weights when due.

        Returns:
            ``(frames trained on, metrics)``: ``time/wait_s``, ``time/learn_s``,
            episodes, ``learner/<name>``, ``policy_lag/*`` and ``collector/<name>``.
        """
        if self._batches is None:
            self._batches = iter(self.collector)
        start = time.perf_counter()
        batch = next(self._batches)
        got_batch = time.perf_counter()
        learner_metrics = self.learner.update(batch)
        learned = time.perf_counter()
        # An update skipped for NaN / inf left the weights as they were: nothing new to push.
        pushed = self._push.count(0 if float(learner_metrics.get("nonfinite_skipped", 0)) else 1)
        if pushed:
            self.push_weights()
        metrics = {"time/wait_s": got_batch - start, "time/learn_s": learned - got_batch}
        self.episodes = finished_episodes(batch, self._episode_starts)
        metrics.update(finished_metrics(self.episodes))
        metrics.update({f"learner/{k}": float(v) for k, v in learner_metrics.items()})
        # The push that followed this update does not count: the batch was used before it.
        metrics.update(self._lag_metrics(batch, self.collector.policy_version - int(pushed)))
        # the driver's own counters: a step never waits on a ping of every worker
        metrics.update(numeric_stats(self.collector.counters(), "collector"))
        return int(learner_metrics["num_frames"].item()), metrics

    def _lag_metrics(self, batch: TensorDictBase, newest_version: int) -> dict[str, float]:
        return lag_metrics(batch, newest_version)

    def push_weights(self) -> None:
        """Sends the learner's policy weights to every collector worker."""
        self.collector.update_policy_weights_(self.learner.policy_weights())
        self._push.pushed()

    def state_dict(self) -> dict[str, Any]:
        """``{"learner", "updates_since_push", "collector"}``."""
        return {
            "learner": self.learner.state_dict(),
            **self._push.state_dict(),
            "collector": self.collector.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict` and pushes the restored weights."""
        self.learner.load_state_dict(state["learner"])
        self.collector.load_state_dict(state["collector"])
        self.push_weights()
        self._push.load_state_dict(state)  # after the push, which restarts the count

    def set_seed(self, seed: int) -> int:
        """Reseeds every collector worker distinctly from ``seed``."""
        return self.collector.set_seed(seed)

    def shutdown(self) -> None:
        """Stops the collector workers (and the learner ranks). Idempotent."""
        self.collector.shutdown()
        if isinstance(self.learner, LearnerGroup):
            self.learner.shutdown()
