"""What runs in a shard's actor of a :class:`~tdscheme.replay.sharded.ShardedReplayBuffer`.

Each shard is torchrl's ``RayReplayBuffer`` actor holding a :class:`FrameReplayBuffer`; the
driver runs these functions on it (Ray's ``__ray_call__``), each one call: its priority
totals, a draw with the drawn frames' priorities, and priority updates that leave out the
frames written again since they were drawn.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase
from torchrl.data import TensorDictReplayBuffer

__all__ = ["FrameReplayBuffer", "priority_stats", "sample_with_leaves", "update_fresh"]


class FrameReplayBuffer(TensorDictReplayBuffer):
    """torchrl's ``TensorDictReplayBuffer`` holding frames one by one: a ``[num_envs, time]`` write
    is flattened (a shard samples, and prioritizes, single transitions, as Ape-X does), and a
    write's priorities (its ``priority_key``) set the frames' priorities without being stored
    (a loss writes its own ``td_error`` into each sample)."""

    #: workers' writes are frames, whatever the storage's ndim (``ray_held._storage_ndim``)
    writes_frames = True

    def extend(self, tensordicts: TensorDictBase, **kwargs: Any) -> torch.Tensor:
        if tensordicts.ndim > 1:
            tensordicts = tensordicts.reshape(-1)
        priority = tensordicts.get(self.priority_key, None)
        if priority is None:
            return super().extend(tensordicts, **kwargs)
        index = super().extend(tensordicts.exclude(self.priority_key), update_priority=False)
        self.update_priority(index, priority.reshape(-1))
        return index


def priority_stats(buffer: Any) -> tuple[float, float, int, int]:
    """Runs in a shard's actor: (sum of p ** alpha, min of it, frames held, frames written)."""
    held = len(buffer)
    if held == 0:
        return 0.0, float("inf"), 0, int(buffer.write_count)
    sampler = buffer.sampler
    total = float(sampler._sum_tree.query(0, held))
    low = float(sampler._min_tree.query(0, held))
    return total, low, held, int(buffer.write_count)


def sample_with_leaves(buffer: Any, count: int) -> tuple[Any, Any, tuple[float, float, int, int]]:
    """Runs in a shard's actor: ``count`` frames by priority (``None`` for 0), their ``p ** alpha``,
    and the shard's :func:`priority_stats` (one round trip a minibatch)."""
    stats = priority_stats(buffer)
    if count == 0 or stats[2] == 0:
        return None, None, stats
    sample = buffer.sample(count)
    leaves = np.asarray(buffer.sampler._sum_tree[sample.get("index")], dtype=np.float64)
    return sample, leaves, stats


def update_fresh(
    buffer: Any, index: torch.Tensor, priority: torch.Tensor, written_at: torch.Tensor
) -> int:
    """Runs in a shard's actor: new priorities for frames not overwritten since sampled; returns those dropped."""
    capacity = buffer._storage.max_size
    written_since = int(buffer.write_count) - written_at
    # slot i was written again iff a write position p in [written_at, now) has p % capacity == i
    # a negative count: the shard was restarted empty since (its frames are gone)
    stale = (
        (written_since < 0)
        | (written_since >= capacity)
        | ((index - written_at) % capacity < written_since)
    )
    fresh = ~stale
    if fresh.any():
        buffer.update_priority(index[fresh], priority[fresh])
    return int(stale.sum())
