"""The Scheme's metric names: episodes, policy lag and collector stats of an iteration.

Episode returns are computed one way (:mod:`tdscheme.episodes`) for every loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tensordict import TensorDictBase

from tdscheme.episodes import FinishedEpisodes, finished_episodes
from tdscheme.keys import MASK_KEY, POLICY_VERSION_KEY

__all__ = [
    "LAG_HISTOGRAM_PREFIX",
    "episode_metrics",
    "episode_return_metrics",
    "finished_metrics",
    "lag_distribution",
    "lag_metrics",
    "numeric_stats",
]

#: The prefix of the policy-lag histogram's metrics (``policy_lag/hist/<lag>``, fractions of frames).
LAG_HISTOGRAM_PREFIX = "policy_lag/hist/"


def episode_return_metrics(returns: list[float], lengths: list[float] | None = None) -> dict:
    """``train/episodes``, ``train/episode_return`` (and ``train/episode_length``); empty for none.

    Example:
        >>> episode_return_metrics([2.0, 4.0], [2.0, 6.0])
        {'train/episodes': 2.0, 'train/episode_return': 3.0, 'train/episode_length': 4.0}
        >>> episode_return_metrics([])
        {}
    """
    if not returns:
        return {}
    out = {"train/episodes": float(len(returns)), "train/episode_return": _mean(returns)}
    if lengths:
        out["train/episode_length"] = _mean(lengths)
    return out


def finished_metrics(episodes: FinishedEpisodes | None) -> dict[str, float]:
    """:func:`episode_return_metrics` of ``episodes`` (empty for ``None``: none recorded)."""
    return {} if episodes is None else episode_return_metrics(episodes.returns, episodes.lengths)


def episode_metrics(batch: TensorDictBase) -> dict[str, float]:
    """Mean return and length of the episodes that finished in ``batch``.

    Args:
        batch: collected frames with ``("next", "done")`` and, from torchrl's
            ``RewardSum`` and ``StepCounter`` transforms, ``("next",
            "episode_reward")`` and ``("next", "step_count")``.

    Returns:
        ``train/episode_return``, ``train/episode_length`` (when recorded) and
        ``train/episodes``; empty when no episode finished or nothing is recorded.

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> batch = TensorDict({"next": TensorDict(
        ...     done=torch.tensor([[False], [True], [True]]),
        ...     episode_reward=torch.tensor([[1.0], [2.0], [4.0]]),
        ...     step_count=torch.tensor([[1], [2], [6]]), batch_size=[3])}, batch_size=[3])
        >>> episode_metrics(batch)
        {'train/episodes': 2.0, 'train/episode_return': 3.0, 'train/episode_length': 4.0}
    """
    return finished_metrics(finished_episodes(batch))


def lag_metrics(batch: TensorDictBase, newest_version: int) -> dict[str, float]:
    """``policy_lag/mean`` and ``policy_lag/max``: pushes between a batch's weights and ``newest_version``.

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> batch = TensorDict({"collector": {"policy_version": torch.tensor([1, 3])}}, [2])
        >>> lag_metrics(batch, 3)
        {'policy_lag/mean': 1.0, 'policy_lag/max': 2.0}
    """
    lag = _frame_lags(batch, newest_version)
    if lag is None:
        return {}
    return {"policy_lag/mean": lag.mean().item(), "policy_lag/max": lag.max().item()}


def lag_distribution(batch: TensorDictBase, newest_version: int, *, buckets: int) -> dict:
    """The policy lag of ``batch``'s frames as a distribution: min, mean, max and a histogram.

    Args:
        batch: frames stamped with ``("collector", "policy_version")``.
        newest_version: the version the learner's weights are at (in weight pushes).
        buckets: lags ``0 .. buckets - 2`` get a bucket each, and ``buckets - 1`` holds
            that lag and every larger one (its name ends with ``+``), so a run logs the
            same names at every step.

    Returns:
        ``policy_lag/min``, ``policy_lag/mean``, ``policy_lag/max`` and
        ``policy_lag/hist/<lag>``: the fraction of the (valid) frames with that lag;
        empty for a batch without versions.

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> batch = TensorDict({"collector": {"policy_version": torch.tensor([3, 3, 2, 0])}}, [4])
        >>> lag_distribution(batch, 3, buckets=3)  # doctest: +NORMALIZE_WHITESPACE
        {'policy_lag/min': 0.0, 'policy_lag/mean': 1.0, 'policy_lag/max': 3.0,
         'policy_lag/hist/0': 0.5, 'policy_lag/hist/1': 0.25, 'policy_lag/hist/2+': 0.25}
    """
    lag = _frame_lags(batch, newest_version)
    if lag is None or lag.numel() == 0:
        return {}
    out = {
        "policy_lag/min": lag.min().item(),
        "policy_lag/mean": lag.mean().item(),
        "policy_lag/max": lag.max().item(),
    }
    counts = lag.long().flatten().clamp_max(buckets - 1).bincount(minlength=buckets)
    for value, count in enumerate(counts.tolist()):
        name = f"{value}+" if value == buckets - 1 else str(value)
        out[f"{LAG_HISTOGRAM_PREFIX}{name}"] = count / lag.numel()
    return out


def _frame_lags(batch: TensorDictBase, newest_version: int) -> Any:
    """Each valid frame's lag (``newest_version`` minus its policy version, >= 0), or ``None``."""
    versions = batch.get(POLICY_VERSION_KEY, None)
    if versions is None:
        return None
    mask = batch.get(MASK_KEY, None)
    if mask is not None:
        versions = versions[mask.bool()]
    return (newest_version - versions).clamp_min(0).float()


def numeric_stats(stats: Mapping[str, Any], prefix: str) -> dict[str, float]:
    """The numbers of a stats dict as ``<prefix>/<name>`` floats (lists, strings, bools left out).

    Nested dicts (the frame ledger) become ``<prefix>/<name>/<key>``; the per-worker
    ``fast_path`` list becomes the fraction of workers on the fast path.

    Example:
        >>> numeric_stats({"frames": 10, "fps": 2.5, "restarts_per_worker": [0], "ok": True}, "c")
        {'c/frames': 10.0, 'c/fps': 2.5}
        >>> numeric_stats({"fast_path": [True, "collector_class=Collector: ..."]}, "c")
        {'c/fast_path': 0.5}
        >>> numeric_stats({"ledger": {"collected": 4, "lost": 4, "balanced": True}}, "c")
        {'c/ledger/collected': 4.0, 'c/ledger/lost': 4.0}
    """
    out: dict[str, float] = {}
    for key, value in stats.items():
        if isinstance(value, Mapping) and key == "ledger":
            out.update(numeric_stats(value, f"{prefix}/{key}"))
        elif key == "fast_path" and isinstance(value, list) and value:
            out[f"{prefix}/{key}"] = sum(status is True for status in value) / len(value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[f"{prefix}/{key}"] = float(value)
    return out


def _mean(values: list[float]) -> float:
    return float(sum(values) / len(values))
