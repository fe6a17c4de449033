"""Synchronous, centralized gradient workers: average one gradient per worker, apply once.

Each step sends the driver Learner's weights to every idle worker with one
``ray.put``, waits for one gradient per worker, averages them weighted by frame
count (:func:`~tdscheme.learner.average_gradients`) and takes one optimizer step.
With preemption thresholds, the step stops waiting for stragglers once enough
workers and frames are in; a straggler's gradient, computed on the weights of
an earlier version, is dropped (and counted) when it arrives, and that worker
gets the current weights and a new request at once.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from tdscheme.gradient_workers.coordinator import GradientCoordinator
from tdscheme.gradient_workers.metrics import Timer, step_metrics
from tdscheme.gradient_workers.pool import DIED
from tdscheme.gradient_workers.worker import GradientResult
from tdscheme.learner import average_gradients
from tdscheme.runtime.preemption import PreemptionConfig

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

    def _dispatch(self, worker_id: int, timers: dict[str, Timer]) -> None:
        with timers["dispatch"]:
            ref = self._weights_ref()
            future = self.pool.submit(worker_id, "compute_gradients", ref, self.learner.version)
            self._in_flight[future] = worker_id

    def _step(self, timers: dict[str, Timer]) -> dict[str, float]:
        num_workers = len(self.pool)
        busy = set(self._in_flight.values())
        for worker_id in range(num_workers):
            if worker_id not in busy:
                self._dispatch(worker_id, timers)
        fresh: dict[int, GradientResult] = {}
        dropped: list[GradientResult] = []
        deadline = self._deadline()
        while len(fresh) < num_workers and not self._preemption.should_cut(
            finished=len(fresh),
            workers=num_workers,
            frames=sum(r.frames for r in fresh.values()),
            frames_per_batch=num_workers * self.config.frames_per_batch,
        ):
            pending = [ref for ref, w in self._in_flight.items() if w not in fresh]
            with timers["wait"]:
                ready = self.pool.wait(pending, timeout_s=max(0.0, deadline - time.monotonic()))
            if not ready:
                waiting = sorted(w for w in self._in_flight.values() if w not in fresh)
                raise TimeoutError(
                    f"gradient workers {waiting} sent no gradient in "
                    f"timeout_s={self.config.timeout_s} s"
                )
            for ref in ready:
                self._receive(ref, fresh, dropped, timers)
        return self._apply(list(fresh.values()), dropped, timers)

    def _receive(
        self,
        ref: Any,
        fresh: dict[int, GradientResult],
        dropped: list[GradientResult],
        timers: dict[str, Timer],
    ) -> None:
        worker_id = self._in_flight.pop(ref)
        result = self.pool.outcome(ref)
        if result is DIED:
            self._restart(worker_id, "died while computing a gradient")
            self._dispatch(worker_id, timers)
        elif result.version != self.learner.version:
            # A straggler left out of an earlier step: its gradient is for old weights.
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
        with timers["apply"]:
            grads = [self._codec.decode(r.grads) for r in fresh]
            average = average_gradients(grads, weights=[r.frames for r in fresh])
            applied = self.learner.apply_gradients(average)
        metrics = step_metrics(fresh, dropped, updates=1)
        metrics["applied_grad_norm"] = float(applied["grad_norm"])
        metrics["preempted"] = float(len(self.pool) - len(fresh))
        return metrics
