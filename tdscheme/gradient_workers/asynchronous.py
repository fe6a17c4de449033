"""Asynchronous gradient workers (A3C): apply each gradient as it arrives, reply to its sender.

Every worker always has one gradient request in flight. A step takes the first
``grads_per_step`` gradients to arrive, in arrival order. Each one's staleness is
the number of learner versions between the weights it was computed with and the
driver's Learner when it arrives; one staler than ``max_grad_staleness`` is
dropped and counted, any other is applied at once. Either way its sender gets
the Learner's current weights (one ``ray.put``) with its next request, so fresh
weights go to the sender only, and the other workers keep computing.
"""

from __future__ import annotations

import logging

from tdscheme.gradient_workers.coordinator import GradientCoordinator
from tdscheme.gradient_workers.metrics import Timer, step_metrics
from tdscheme.gradient_workers.pool import DIED
from tdscheme.gradient_workers.worker import GradientResult

__all__ = ["AsynchronousCoordinator"]

logger = logging.getLogger(__name__)


class AsynchronousCoordinator(GradientCoordinator):
    """A3C-style gradient workers; see :mod:`~tdscheme.gradient_workers.asynchronous`.

    See :class:`~tdscheme.gradient_workers.coordinator.GradientCoordinator` for the
    arguments. :meth:`step` metrics add ``staleness_mean`` and ``staleness_max``
    (over the applied gradients, in learner versions) and ``staleness_dropped_max``
    (over the dropped ones, when any); ``updates`` is the number applied.
    Requests in flight keep running between steps.
    """

    mode = "asynchronous"

    def _step(self, timers: dict[str, Timer]) -> dict[str, float]:
        busy = set(self._in_flight.values())
        for worker_id in range(len(self.pool)):
            if worker_id not in busy:
                self._dispatch(worker_id, timers)
        applied: list[GradientResult] = []
        dropped: list[GradientResult] = []
        staleness: list[int] = []
        dropped_staleness: list[int] = []
        grad_norms: list[float] = []
        while len(applied) + len(dropped) < self.config.grads_per_step_or_default():
            ready = self._wait_ready(list(self._in_flight), timers)
            if not ready:
                continue  # a hung worker was replaced, or the first due time passed
            worker_id, result = self._outcome(ready[0])
            if result is DIED:
                self._restart(worker_id, "died while computing a gradient")
            elif not self._nonfinite.record(result):
                dropped.append(result)
            else:
                age = self.learner.version - result.version
                bound = self.config.max_grad_staleness
                if bound is not None and age > bound:
                    dropped.append(result)
                    dropped_staleness.append(age)
                else:
                    with timers["apply"]:
                        out = self.learner.apply_gradients(self._codec.decode(result.grads))
                    if "grad_norm" in out:
                        applied.append(result)
                        staleness.append(age)
                        grad_norms.append(float(out["grad_norm"]))
                    else:  # the driver Learner skipped it (NaN / inf after all): counted there
                        dropped.append(result)
            self._dispatch(worker_id, timers)
        return self._metrics(applied, dropped, staleness, dropped_staleness, grad_norms)

    @staticmethod
    def _metrics(
        applied: list[GradientResult],
        dropped: list[GradientResult],
        staleness: list[int],
        dropped_staleness: list[int],
        grad_norms: list[float],
    ) -> dict[str, float]:
        metrics = step_metrics(applied, dropped, updates=len(applied))
        if staleness:
            metrics["staleness_mean"] = sum(staleness) / len(staleness)
            metrics["staleness_max"] = float(max(staleness))
            metrics["applied_grad_norm"] = sum(grad_norms) / len(grad_norms)
        if dropped_staleness:
            metrics["staleness_dropped_max"] = float(max(dropped_staleness))
        return metrics
