"""GradientWorkerPool: the gradient worker actors, their calls, deaths and restarts.

A thin user of :class:`~tdscheme.runtime.actor_pool.ActorPool` (slots, restarts,
bounded calls, remote errors); the coordinators speak to workers through it. A
dead worker is rebuilt from its small :class:`GradientWorkerSpec` with the
weights the coordinator hands it, and a fresh seed. An exception raised inside a
worker becomes a :class:`GradientWorkerError` naming the worker, with the remote
traceback.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ray

from tdscheme.errors import GradientWorkerError
from tdscheme.gradient_workers.config import GradientWorkerSpec
from tdscheme.gradient_workers.worker import GradientWorker
from tdscheme.runtime.actor_pool import DIED, ActorPool

__all__ = ["DIED", "GradientWorkerPool"]


class GradientWorkerPool(ActorPool):
    """Owns the gradient worker actors.

    Args:
        specs: one spec per worker.
        remote_options: Ray actor options of every worker, e.g. ``{"num_cpus": 1}``.
        seed: base seed; worker ``i`` after ``g`` restarts gets a distinct seed.
        max_restarts: rebuilds allowed per worker before a :class:`GradientWorkerError`.
    """

    error_class = GradientWorkerError

    def __init__(
        self,
        specs: Sequence[GradientWorkerSpec],
        *,
        remote_options: dict[str, Any],
        seed: int | None = None,
        max_restarts: int = 3,
    ) -> None:
        super().__init__(GradientWorker, max_restarts=max_restarts, seed=seed)
        for spec in specs:
            self.add_slot(spec, remote_options)

    def start_all(self, weights_ref: Any, version: int) -> None:
        """Starts every worker with the given weights (an object ref) and version."""
        for worker_id in range(len(self._slots)):
            self.start(worker_id, weights=weights_ref, version=version)

    def restart(  # type: ignore[override]
        self, worker_id: int, reason: str, *, weights_ref: Any, version: int, **start_kwargs: Any
    ) -> None:
        """Replaces a dead worker with a fresh one holding the given weights (and env config).

        Raises:
            GradientWorkerError: the worker has used up ``max_restarts``.
        """
        super().restart(worker_id, reason, weights=weights_ref, version=version, **start_kwargs)

    def put(self, value: Any) -> Any:
        """Puts ``value`` in the object store once; returns its ref."""
        return ray.put(value)
