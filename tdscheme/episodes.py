"""Episodes that ended in a collected batch: their returns and lengths, computed one way.

The rule every path follows (the driver's collector path and the gradient
workers): an env that records its episodes (torchrl's ``RewardSum`` and
``StepCounter`` transforms write ``("next", "episode_reward")`` and
``("next", "step_count")``) is read at its ``done`` frames, so a reward
transform added after ``RewardSum`` (such as ``RewardScaling``) does not change
the logged return. An env that records nothing is summed along time by an
:class:`EpisodeTracker` across batches.

The env-config version an episode is counted at is the one it *started* under, which an
episode that spans batches took from an earlier one: :class:`EpisodeStarts` keeps it per
running trajectory across batches (a curriculum then never counts an episode the workers
switched midway at the new level).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from tensordict import TensorDictBase

from tdscheme.keys import (
    ENV_CONFIG_VERSION_KEY,
    ENV_TASK_KEY,
    MASK_KEY,
    TRAJ_IDS_KEY,
    WORKER_ID_KEY,
)

__all__ = ["EpisodeStarts", "EpisodeTracker", "FinishedEpisodes", "finished_episodes"]

#: Running trajectories an :class:`EpisodeStarts` remembers at most (the oldest forgotten:
#: those of workers that died mid-episode never end).
MAX_RUNNING = 100_000
#: A (worker, trajectory) key is ``worker << _TRAJ_BITS | trajectory``.
_TRAJ_BITS = 40


class FinishedEpisodes(NamedTuple):
    """The episodes that ended in a batch."""

    returns: list[float]
    lengths: list[float] | None  # None when the env records no step count
    #: the env-config task (level index, -1: none) each ran at its end, and the version it
    #: started under (with an :class:`EpisodeStarts`; without: the one at its end); None
    #: when the frames carry none
    tasks: list[int] | None = None
    versions: list[int] | None = None


def finished_episodes(
    batch: TensorDictBase, starts: EpisodeStarts | None = None
) -> FinishedEpisodes | None:
    """The recorded return (and length) of every episode that ended in ``batch``.

    Args:
        batch: collected frames with ``("next", "done")`` and ``("next",
            "episode_reward")`` (and optionally ``("next", "step_count")``);
            frames that ``("collector", "mask")`` marks invalid are left out.
        starts: the stream's :class:`EpisodeStarts` (fed with every batch, in order):
            versions are then those each episode started under.

    Returns:
        The finished episodes, or ``None`` when the batch records no episode
        return (no ``("next", "episode_reward")``).

    Example:
        >>> from tensordict import TensorDict
        >>> batch = TensorDict({"next": TensorDict(
        ...     done=torch.tensor([[False], [True], [True]]),
        ...     episode_reward=torch.tensor([[1.0], [2.0], [4.0]]),
        ...     step_count=torch.tensor([[1], [2], [6]]), batch_size=[3])}, batch_size=[3])
        >>> finished_episodes(batch)
        FinishedEpisodes(returns=[2.0, 4.0], lengths=[2.0, 6.0], tasks=None, versions=None)
    """
    done = batch.get(("next", "done"), None)
    returns = batch.get(("next", "episode_reward"), None)
    if done is None or returns is None:
        return None
    done = done.reshape(returns.shape)
    mask = batch.get(MASK_KEY, None)
    if mask is not None:
        done = done & mask.reshape(*mask.shape, *([1] * (done.ndim - mask.ndim))).bool()
    lengths = batch.get(("next", "step_count"), None)
    tasks, versions = (
        _at_ends(batch.get(key, None), done) for key in (ENV_TASK_KEY, ENV_CONFIG_VERSION_KEY)
    )
    if starts is not None and versions is not None:
        versions = starts.update(batch, done) or versions
    return FinishedEpisodes(
        returns=returns[done].double().tolist(),
        lengths=None if lengths is None else lengths.reshape(done.shape)[done].double().tolist(),
        tasks=tasks,
        versions=versions,
    )


def _at_ends(values: torch.Tensor | None, done: torch.Tensor) -> list[int] | None:
    """A per-frame value (shaped as the batch) at the frames where an episode ended."""
    if values is None:
        return None
    return values.reshape(*values.shape, *([1] * (done.ndim - values.ndim)))[done].tolist()


class EpisodeStarts:
    """The env-config version each running trajectory started under, across a stream's batches.

    A worker switches a copy's config at its reset, unless the env takes a config only
    for every copy at once (then at a batch's start) or the push said ``apply="now"``:
    there an episode runs two versions, and the frame where it ends carries the newer.
    Fed every batch of one stream in order, this keeps per ``(worker, trajectory)`` the
    lowest version seen (versions only grow within a copy) and hands it back where the
    trajectory ends.

    Example:
        >>> from tensordict import TensorDict
        >>> from tdscheme.keys import ENV_CONFIG_VERSION_KEY, TRAJ_IDS_KEY
        >>> def batch(traj, version, done):
        ...     return TensorDict({TRAJ_IDS_KEY: torch.tensor(traj),
        ...                        ENV_CONFIG_VERSION_KEY: torch.tensor(version),
        ...                        ("next", "done"): torch.tensor(done).unsqueeze(-1),
        ...                        ("next", "episode_reward"): torch.ones(len(traj), 1)}, [len(traj)])
        >>> starts = EpisodeStarts()
        >>> finished_episodes(batch([0, 0, 1], [1, 1, 1], [False, True, False]), starts).versions
        [1]
        >>> # a batch later the workers switched every copy to version 2: trajectory 1 ends
        >>> finished_episodes(batch([1, 2], [2, 2], [True, False]), starts).versions
        [1]
    """

    def __init__(self) -> None:
        self._first: dict[int, int] = {}  # (worker << 40 | trajectory) -> lowest version

    def update(self, batch: TensorDictBase, done: torch.Tensor) -> list[int] | None:
        """Feeds ``batch``; returns the start versions of the episodes ending at ``done``
        (``finished_episodes``' order), or ``None`` where the frames carry no trajectory ids."""
        traj, versions = batch.get(TRAJ_IDS_KEY, None), batch.get(ENV_CONFIG_VERSION_KEY, None)
        if traj is None or versions is None or traj.shape != versions.shape:
            return None
        worker = batch.get(WORKER_ID_KEY, None)
        worker = torch.zeros_like(traj) if worker is None else worker.reshape(traj.shape)
        ended = done.reshape(*traj.shape, -1).any(-1)
        valid = traj >= 0
        mask = batch.get(MASK_KEY, None)
        if mask is not None:
            valid &= mask.reshape(*mask.shape, *([1] * (traj.ndim - mask.ndim))).bool()
        # one int64 a (worker, trajectory); unique, and each one's lowest version here
        keys = (worker.long() << _TRAJ_BITS) | traj.long()
        unique, inverse = torch.unique(keys[valid], return_inverse=True)
        low = torch.full((len(unique),), torch.iinfo(torch.int64).max, dtype=torch.int64)
        low.scatter_reduce_(0, inverse, versions[valid].long(), "amin")
        ending = keys[ended]
        here = versions[ended].long()  # an ending frame that is no valid step: its own
        if len(unique):
            at = torch.searchsorted(unique, ending).clamp(max=len(unique) - 1)
            here = torch.where(unique[at] == ending, low[at], here)
        first = self._first
        out = [
            min(first.pop(k), v) if k in first else v
            for k, v in zip(ending.tolist(), here.tolist(), strict=True)
        ]
        running = ~torch.isin(unique, ending)  # the trajectories that go on into the next batch
        for k, v in zip(unique[running].tolist(), low[running].tolist(), strict=True):
            first[k] = min(first.get(k, v), v)
        while len(first) > MAX_RUNNING:  # dicts keep insertion order: the oldest first
            first.pop(next(iter(first)))
        return out


class EpisodeTracker:
    """The returns of the episodes that end in a stream of batches from one collector.

    Recorded returns are read as :func:`finished_episodes` reads them; without
    them, rewards are summed along time across batches.

    Example:
        >>> from tensordict import TensorDict
        >>> tracker = EpisodeTracker()
        >>> step = lambda r, d: TensorDict(
        ...     {"next": {"reward": torch.tensor(r).reshape(-1, 1),
        ...               "done": torch.tensor(d).reshape(-1, 1)}}, [len(r)])
        >>> tracker.update(step([1.0, 1.0, 1.0], [False, True, False]))
        [2.0]
        >>> tracker.update(step([1.0, 1.0], [False, True]))
        [3.0]
    """

    def __init__(self) -> None:
        self._running: torch.Tensor | None = None

    def update(self, batch: TensorDictBase) -> list[float]:
        """Adds a batch shaped ``[*env_batch, T]`` (time last).

        Args:
            batch: a collector batch with ``("next", "reward")`` and ``("next", "done")``.

        Returns:
            The returns of the episodes that ended in this batch.
        """
        recorded = finished_episodes(batch)
        if recorded is not None:
            return recorded.returns
        steps = batch.batch_size[-1]
        reward = batch.get(("next", "reward")).reshape(*batch.batch_size, -1).sum(-1)
        done = batch.get(("next", "done")).reshape(*batch.batch_size, -1).any(-1)
        reward = reward.reshape(-1, steps).double()
        done = done.reshape(-1, steps)
        if self._running is None or self._running.shape[0] != reward.shape[0]:
            self._running = torch.zeros(reward.shape[0], dtype=torch.float64)
        finished: list[float] = []
        running = self._running
        for t in range(steps):
            running += reward[:, t]
            ended = done[:, t]
            if ended.any():
                finished.extend(running[ended].tolist())
                running[ended] = 0.0
        return finished
