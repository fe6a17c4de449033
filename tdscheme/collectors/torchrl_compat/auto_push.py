"""torchrl's automatic weight pushes (``update_after_each_batch``, ``max_weight_update_interval``).

torchrl's RayCollector pushes weights on its own when the consumer asks for the next
batch; these two arguments say to which workers. The rule here decides; the collector's
weight path (:class:`~tdscheme.collectors.driver.weights.WeightPusher`, or torchrl's
learner publication around it) pushes, and tells the rule of every push it makes.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["AutoPushRule"]


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
