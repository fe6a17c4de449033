"""What a RayCollector pushes and when: weights from any source, torchrl's automatic pushes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tensordict import TensorDict, TensorDictBase
from torch import nn

__all__ = ["AutoPushRule", "weights_from"]


def weights_from(source: Any) -> TensorDictBase:
    """The weights to push, as a TensorDict.

    Args:
        source: a module (its parameters and buffers), a TensorDict, or a dict of
            tensors (flat ``"a.b"`` keys are unflattened).

    Raises:
        TypeError: ``source`` is none of these.

    Example:
        >>> sorted(weights_from(nn.Linear(2, 1)).keys())
        ['bias', 'weight']
    """
    if isinstance(source, nn.Module):
        return TensorDict.from_module(source).data
    if isinstance(source, TensorDictBase):
        return source.data if hasattr(source, "data") else source
    if isinstance(source, dict):
        return TensorDict(source).unflatten_keys(".") if source else TensorDict()
    raise TypeError(
        f"policy_or_weights must be a TensorDict, a dict of tensors or an nn.Module, "
        f"got {type(source).__name__}"
    )


class AutoPushRule:
    """torchrl's automatic weight pushes, made when the consumer asks for the next batch.

    * ``update_after_each_batch=True``: to every worker whose batch was just used;
    * ``max_weight_update_interval=k >= 0``: to every worker that produced more than
      ``k`` batches since it last received weights; -1 never forces a push.

    Example:
        >>> rule = AutoPushRule(update_after_each_batch=False, max_weight_update_interval=1)
        >>> rule.add_workers(2)
        >>> rule.due([0]), rule.due([0])
        ([], [0])
        >>> rule.pushed([0]); rule.due([0])
        []
    """

    def __init__(self, *, update_after_each_batch: bool, max_weight_update_interval: int) -> None:
        self.update_after_each_batch = update_after_each_batch
        self.max_weight_update_interval = max_weight_update_interval
        self._since_push: list[int] = []

    def add_workers(self, count: int) -> None:
        """Tracks ``count`` more workers (none has produced a batch yet)."""
        self._since_push.extend([0] * count)

    def due(self, worker_ids: Sequence[int]) -> list[int]:
        """Counts a batch from each of ``worker_ids``; returns those due for a push."""
        for i in worker_ids:
            self._since_push[i] += 1
        if self.update_after_each_batch:
            return list(worker_ids)
        if self.max_weight_update_interval >= 0:
            limit = self.max_weight_update_interval
            return [i for i in worker_ids if self._since_push[i] > limit]
        return []

    def pushed(self, worker_ids: Sequence[int]) -> None:
        """Records a push to ``worker_ids`` (explicit pushes reset the count too)."""
        for i in worker_ids:
            self._since_push[i] = 0
