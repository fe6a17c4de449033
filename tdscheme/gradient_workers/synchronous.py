"""Synchronous, centralized gradient workers: average one gradient per worker, apply once.

Each step sends the driver Learner's weights to every idle worker with one
``ray.put``, waits for one gradient per worker, averages them weighted by frame
count (:func:`~tdscheme.learner.average_gradients`) and takes one optimizer step.
With preemption thresholds, the step stops waiting for stragglers once enough
workers and frames are in; a straggler's gradient, computed on the weights of
an earlier version, is dropped (and counted) when it arrives, and that worker
gets the current weights and a new request at once. A gradient holding NaN / inf
is left out of the average (when none is finite, no step: the weights and the
version stay), see :mod:`~tdscheme.gradient_workers.nonfinite`.
"""

from __future__ import annotations

import logging
from typing import Any

from tdscheme.gradient_workers.coordinator import GradientCoordinator
from tdscheme.gradient_workers.metrics import Timer, step_metrics
from tdscheme.gradient_workers.pool import DIED
from tdscheme.gradient_workers.worker import GradientResult
from tdscheme.learner import average_gradients
from tdscheme.stragglers import PreemptionConfig

__all__ = ["SynchronousCoordinator"]

logger = logging.getLogger(__name__)


class SynchronousCoordinator(GradientCoordinator):
    """One gradient per worker per step, frame-weighted average, one update, one broadcast.

    See :class:`~tdscheme.gradient_workers.coordinator.GradientCoordinator` for the
    arguments. :meth:`step` metrics add ``preempted`` (workers left out of this step).

    With the same data, one step equals one ``Learner.compute_gradients`` plus
    ``apply_gradients`` on the workers' batches concatenated (for a loss that is a
    mean over frames, up to float32 summation order).
    """

    mode = "synchronous"

    def _setup(self) -> None:
        self._preemption: PreemptionConfig = self.config.preemption  # type: ignore[assignment]

    def _step(self, timers: dict[str, Timer]) -> dict[str, float]:
        num_workers = len(self.pool)
        busy = set(self._in_flight.values())
        for worker_id in range(num_workers):
            if worker_id not in busy:
                self._dispatch(worker_id, timers)
        fresh: dict[int, GradientResult] = {}
        dropped: list[GradientResult] = []
        while len(fresh) < num_workers and not self._preemption.should_cut(
            finished=len(fresh),
            workers=num_workers,
            frames=sum(r.frames for r in fresh.values()),
            frames_per_batch=num_workers * self.config.frames_per_batch,
        ):
            pending = [ref for ref, w in self._in_flight.items() if w not in fresh]
            for ref in self._wait_ready(pending, timers):
                self._receive(ref, fresh, dropped, timers)
        return self._apply(list(fresh.values()), dropped, timers)

    def _receive(
        self,
        ref: Any,
        fresh: dict[int, GradientResult],
        dropped: list[GradientResult],
        timers: dict[str, Timer],
    ) -> None:
        worker_id, result = self._outcome(ref)
        if result is DIED:
            self._restart(worker_id, "died while computing a gradient")
            self._dispatch(worker_id, timers)
        elif result.version != self.learner.version:
            # A straggler left out of an earlier step: its gradient is for old weights.
            self._nonfinite.record(result)
            dropped.append(result)
            self._dispatch(worker_id, timers)
        else:
            fresh[worker_id] = result

    def _apply(
        self,
        fresh: list[GradientResult],
        dropped: list[GradientResult],
        timers: dict[str, Timer],
    ) -> dict[str, float]:
        finite, nonfinite = self._nonfinite.split(fresh)
        version = self.learner.version
        applied = None
        if finite:  # none finite: no step, the weights and version stay
            with timers["apply"]:
                grads = [self._codec.decode(r.grads) for r in finite]
                average = average_gradients(grads, weights=[r.frames for r in finite])
                applied = self.learner.apply_gradients(average)
        updates = self.learner.version - version
        metrics = step_metrics(finite, [*dropped, *nonfinite], updates=updates)
        if updates:
            metrics["applied_grad_norm"] = float(applied["grad_norm"])
        metrics["preempted"] = float(len(self.pool) - len(fresh))
        return metrics
