"""A gradient worker's own collection: ``num_collectors`` local torchrl collectors and episode returns.

The collectors are built and stepped as collector workers build theirs
(:class:`~tdscheme.rollout.worker_collector.WorkerCollector`: the policy's keys checked,
NaN observations named, env steps counted), tdscheme's
:class:`~tdscheme.rollout.lean.LeanCollector` by default: torchrl's ``Collector`` with the
lean rollout where it can run (the same frames, faster), torchrl's own rollout elsewhere.

Episode returns follow :mod:`tdscheme.episodes` (the recorded return wins), as on the
driver's collector path.

A gradient worker steps its collectors in its own process rather than owning
nested Ray collector actors: collection still scales with the number of
gradient workers (each is a process), and a batch never crosses Ray before its
gradient is computed, which on a few cores costs less than extra actors.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn

from tdscheme.episodes import EpisodeTracker
from tdscheme.rollout.env_config import EnvConfigPush
from tdscheme.rollout.lean import LeanCollector
from tdscheme.rollout.worker_collector import WorkerCollector

__all__ = ["LocalCollection"]

logger = logging.getLogger(__name__)


class LocalCollection:
    """``num_collectors`` torchrl collectors stepped in turn, their batches stacked.

    Args:
        env_factory: builds one torchrl env per collector.
        policy: the module the collectors run; it is used, not copied, so in-place
            weight updates (a Learner's optimizer step) reach the collectors at once.
        num_collectors: collectors, ``>= 1``.
        frames_per_collector: frames each collector adds to one batch.
        seed: seeds collector ``i`` with ``seed + i`` when given.
        collector_kwargs: extra keyword arguments for every collector.
        collector_class: a single-process torchrl collector class (``BaseCollector``
            subclass taking one env); ``None``: :class:`~tdscheme.rollout.lean.LeanCollector`.
        env_config: the env config every collector's envs run from the start (a rebuilt
            gradient worker's); later ones come through :meth:`set_env_config`.

    Example:
        >>> from functools import partial
        >>> from tdscheme.envs import make_env
        >>> from tdscheme.presets.actor_critic import actor_critic_modules
        >>> actor = actor_critic_modules("CartPole-v1", hidden_sizes=(8,))["actor"]
        >>> collection = LocalCollection(partial(make_env, "CartPole-v1"), actor,
        ...                              num_collectors=2, frames_per_collector=20, seed=0)
        >>> batch, returns = collection.collect()
        >>> batch.batch_size, collection.collector_class.__name__
        (torch.Size([2, 20]), 'LeanCollector')
        >>> collection.shutdown()
    """

    def __init__(
        self,
        env_factory: Callable[[], Any],
        policy: nn.Module,
        *,
        num_collectors: int,
        frames_per_collector: int,
        seed: int | None = None,
        collector_kwargs: dict[str, Any] | None = None,
        collector_class: type | None = None,
        env_config: EnvConfigPush | None = None,
    ) -> None:
        #: the class of every collector (the user's, or LeanCollector)
        self.collector_class = LeanCollector if collector_class is None else collector_class
        self._rollouts = [
            WorkerCollector(
                env_factory,
                policy,
                frames_per_batch=frames_per_collector,
                collector_class=self.collector_class,
                collector_kwargs=collector_kwargs,
                env_config=env_config,
            )  # fmt: skip
            for _ in range(num_collectors)
        ]
        if seed is not None:
            self.set_seed(seed)
        self._trackers = [EpisodeTracker() for _ in self._rollouts]

    def set_seed(self, seed: int) -> None:
        """Seeds collector ``i`` with ``seed + i`` and resets its envs (episodes restart)."""
        for i, rollout in enumerate(self._rollouts):
            rollout.env_config.seed(seed + i)  # task draws: before the seeded resets
            rollout.collector.set_seed(seed + i)
            rollout.collector.reset()
        self._trackers = [EpisodeTracker() for _ in self._rollouts]

    def set_env_config(self, push: EnvConfigPush) -> int:
        """Gives an env config to every collector (applied per env copy: see
        :mod:`tdscheme.rollout.env_config`); returns its version (the acknowledgement).

        Raises:
            ValueError: a version not newer than one received, or an env that takes no config.
        """
        for rollout in self._rollouts:
            rollout.env_config.stage(push)
        return push.version

    def progress(self) -> int:
        """Env steps taken so far by every collector (frames)."""
        return sum(rollout.progress() for rollout in self._rollouts)

    def collect(self) -> tuple[TensorDictBase, list[float]]:
        """Steps every collector for one batch.

        Returns:
            ``(batch, returns)``: the batch (``[num_collectors, *env_batch, T]``, or
            the collector's own shape with one collector) and the returns of the
            episodes that ended in it.
        """
        batches, returns = [], []
        for rollout, tracker in zip(self._rollouts, self._trackers, strict=True):
            batch = rollout.next_batch()
            for version, back, error in rollout.env_config.take_refused():
                # the collector went back to its last config and goes on: a restart would
                # meet the same error (the push's own acknowledgement catches what a
                # check_env_config sees; this is what only applying shows)
                logger.warning("env config version %d refused when applied (back to version "
                               "%d): %s", version, back, error)  # fmt: skip
            returns.extend(tracker.update(batch))
            batches.append(batch)
        if len(batches) == 1:
            return batches[0], returns
        return torch.stack(batches, dim=0), returns

    def shutdown(self) -> None:
        """Shuts every collector (and its env) down. Idempotent."""
        rollouts, self._rollouts = self._rollouts, []
        for rollout in rollouts:
            rollout.shutdown()
