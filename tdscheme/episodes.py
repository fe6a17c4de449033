"""Episodes that ended in a collected batch: their returns and lengths, computed one way.

The rule every path follows (the driver's collector path and the gradient
workers): an env that records its episodes (torchrl's ``RewardSum`` and
``StepCounter`` transforms write ``("next", "episode_reward")`` and
``("next", "step_count")``) is read at its ``done`` frames, so a reward
transform added after ``RewardSum`` (such as ``RewardScaling``) does not change
the logged return. An env that records nothing is summed along time by an
:class:`EpisodeTracker` across batches.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from tensordict import TensorDictBase

from tdscheme.keys import ENV_CONFIG_VERSION_KEY, ENV_TASK_KEY, MASK_KEY

__all__ = ["EpisodeTracker", "FinishedEpisodes", "finished_episodes"]


class FinishedEpisodes(NamedTuple):
    """The episodes that ended in a batch."""

    returns: list[float]
    lengths: list[float] | None  # None when the env records no step count
    #: the env-config task (level index, -1: none) and version each ran at its end;
    #: None when the frames carry none
    tasks: list[int] | None = None
    versions: list[int] | None = None


def finished_episodes(batch: TensorDictBase) -> FinishedEpisodes | None:
    """The recorded return (and length) of every episode that ended in ``batch``.

    Args:
        batch: collected frames with ``("next", "done")`` and ``("next",
            "episode_reward")`` (and optionally ``("next", "step_count")``);
            frames that ``("collector", "mask")`` marks invalid are left out.

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
