"""GradientWorkerPool: the gradient worker actors, their calls, deaths and restarts.

This is the only gradient-workers module that calls ``.remote``, ``ray.put``,
``ray.get`` or ``ray.wait``; the coordinators speak to workers through it. A dead
worker is rebuilt by the pool from its small :class:`GradientWorkerSpec` with the
weights the coordinator hands it, and a fresh seed. An exception raised inside a
worker becomes a :class:`GradientWorkerError` naming the worker, with the remote
traceback.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from tdscheme.collectors import WorkerError
from tdscheme.collectors.pool import incarnation_seed
from tdscheme.gradient_workers.config import GradientWorkerSpec
from tdscheme.gradient_workers.worker import GradientWorker
from tdscheme.log_levels import driver_log_level

__all__ = ["DIED", "GradientWorkerError", "GradientWorkerPool"]

logger = logging.getLogger(__name__)

#: What :meth:`GradientWorkerPool.outcome` returns for a call whose worker died.
DIED = object()


class GradientWorkerError(WorkerError):
    """An error raised inside a gradient worker (or its death past ``max_restarts``), on the driver.

    Attributes:
        worker_id: the worker that failed.
        remote_traceback: the traceback text from the worker process.
    """

    role = "gradient worker"


@dataclasses.dataclass
class _Slot:
    spec: GradientWorkerSpec
    actor: Any = None
    generation: int = 0
    restarts: int = 0


class GradientWorkerPool:
    """Owns the gradient worker actors.

    Args:
        specs: one spec per worker.
        remote_options: Ray actor options of every worker, e.g. ``{"num_cpus": 1}``.
        seed: base seed; worker ``i`` of generation ``g`` gets a distinct seed.
        max_restarts: rebuilds allowed per worker before a :class:`GradientWorkerError`.
    """

    def __init__(
        self,
        specs: Sequence[GradientWorkerSpec],
        *,
        remote_options: dict[str, Any],
        seed: int | None = None,
        max_restarts: int = 3,
    ) -> None:
        self._remote_class = ray.remote(concurrency_groups={"control": 1})(GradientWorker)
        self._options = dict(remote_options)
        self.seed = seed
        self.max_restarts = max_restarts
        self._slots = [_Slot(spec=spec) for spec in specs]
        self._calls: dict[Any, tuple[int, int, str]] = {}  # ref -> (worker, generation, method)

    def __len__(self) -> int:
        return len(self._slots)

    # -- actors ----------------------------------------------------------------------------

    def start(self, weights_ref: Any, version: int) -> None:
        """Starts every worker with the given weights (an object ref) and version."""
        for worker_id in range(len(self._slots)):
            self._start(worker_id, weights_ref, version)

    def _start(self, worker_id: int, weights_ref: Any, version: int) -> None:
        slot = self._slots[worker_id]
        slot.actor = self._remote_class.options(**self._options).remote(
            worker_id,
            slot.spec,
            seed=self.worker_seed(worker_id, slot.generation),
            weights=weights_ref,
            version=version,
            log_level=driver_log_level(),
        )

    def worker_seed(self, worker_id: int, generation: int = 0) -> int | None:
        """The seed of a worker's ``generation``-th incarnation (``None`` when unseeded)."""
        return incarnation_seed(self.seed, worker_id, generation)

    def restart(self, worker_id: int, reason: str, *, weights_ref: Any, version: int) -> None:
        """Replaces a dead worker with a fresh one holding the given weights.

        Raises:
            GradientWorkerError: the worker has used up ``max_restarts``.
        """
        slot = self._slots[worker_id]
        if slot.restarts >= self.max_restarts:
            raise GradientWorkerError(
                worker_id,
                f"died {slot.restarts + 1} times (max_restarts={self.max_restarts}); "
                f"last: {reason}",
            )
        logger.warning("restarting gradient worker %d: %s", worker_id, reason)
        self._kill(slot)
        slot.restarts += 1
        slot.generation += 1
        self._start(worker_id, weights_ref, version)

    def restarts(self) -> list[int]:
        """Restarts per worker."""
        return [slot.restarts for slot in self._slots]

    def actors(self) -> list[Any]:
        """The current actor handle of every worker (for tests that kill one)."""
        return [slot.actor for slot in self._slots]

    # -- calls -------------------------------------------------------------------------------

    def put(self, value: Any) -> Any:
        """Puts ``value`` in the object store once; returns its ref."""
        return ray.put(value)

    def submit(self, worker_id: int, method: str, *args: Any) -> Any:
        """Calls ``method(*args)`` on a worker; returns the future."""
        slot = self._slots[worker_id]
        ref = getattr(slot.actor, method).remote(*args)
        self._calls[ref] = (worker_id, slot.generation, method)
        return ref

    def owner(self, ref: Any) -> int:
        """The worker a future belongs to."""
        return self._calls[ref][0]

    def wait(self, refs: Sequence[Any], *, num_returns: int = 1, timeout_s: float) -> list[Any]:
        """The futures among ``refs`` done within ``timeout_s`` (at most ``num_returns``)."""
        if not refs:
            return []
        ready, _ = ray.wait(list(refs), num_returns=min(num_returns, len(refs)), timeout=timeout_s)
        return ready

    def outcome(self, ref: Any) -> Any:
        """The value of a finished future; :data:`DIED` when its worker died.

        Raises:
            GradientWorkerError: the call raised inside the worker, the worker
                failed in its constructor, or the value could not be fetched.
        """
        worker_id, _, method = self._calls.pop(ref)
        try:
            return ray.get(ref, timeout=60.0)
        except RayTaskError as err:
            message = f"{method} raised {type(err.cause).__name__}: {err.cause}"
            raise GradientWorkerError(worker_id, message, str(err)) from None
        except RayActorError as err:
            if err.actor_init_failed:
                raise GradientWorkerError(worker_id, "failed while starting", str(err)) from None
            return DIED
        except GetTimeoutError:
            raise GradientWorkerError(
                worker_id, f"the finished {method} result could not be fetched in 60 s"
            ) from None

    def is_current(self, ref: Any) -> bool:
        """Whether a pending future was sent to its worker's current incarnation."""
        worker_id, generation, _ = self._calls[ref]
        return generation == self._slots[worker_id].generation

    def forget(self, refs: Sequence[Any]) -> None:
        """Drops futures the caller will not read."""
        for ref in refs:
            self._calls.pop(ref, None)

    def call(self, worker_id: int, method: str, *args: Any, timeout_s: float) -> Any:
        """Calls ``method(*args)`` on one worker and returns its value.

        Raises:
            GradientWorkerError: the worker raised, died, or did not answer in ``timeout_s``.
        """
        ref = self.submit(worker_id, method, *args)
        if not self.wait([ref], timeout_s=timeout_s):
            self.forget([ref])
            raise GradientWorkerError(worker_id, f"did not finish {method} in {timeout_s} s")
        value = self.outcome(ref)
        if value is DIED:
            raise GradientWorkerError(worker_id, f"died during {method}")
        return value

    def call_all(self, method: str, args_per_worker: Sequence[tuple], timeout_s: float) -> list:
        """Calls ``method`` on every worker with its own args; returns the values in order.

        Raises:
            GradientWorkerError: a worker raised, died, or did not answer in ``timeout_s``.
        """
        refs = [
            self.submit(worker_id, method, *args)
            for worker_id, args in zip(range(len(self._slots)), args_per_worker, strict=True)
        ]
        ready = self.wait(refs, num_returns=len(refs), timeout_s=timeout_s)
        if len(ready) < len(refs):
            silent = [self.owner(ref) for ref in refs if ref not in ready]
            self.forget(refs)
            raise GradientWorkerError(
                silent[0], f"workers {silent} did not finish {method} in {timeout_s} s"
            )
        values = []
        for worker_id, ref in enumerate(refs):
            value = self.outcome(ref)
            if value is DIED:
                raise GradientWorkerError(worker_id, f"died during {method}")
            values.append(value)
        return values

    def alive(self, timeout_s: float = 30.0) -> list[bool]:
        """Pings every worker: whether each is alive.

        Raises:
            GradientWorkerError: a worker answers neither a ping nor a death in ``timeout_s``.
        """
        refs = [self.submit(worker_id, "ping") for worker_id in range(len(self._slots))]
        ready = self.wait(refs, num_returns=len(refs), timeout_s=timeout_s)
        if len(ready) < len(refs):
            silent = [self.owner(ref) for ref in refs if ref not in ready]
            self.forget(refs)
            raise GradientWorkerError(silent[0], f"workers {silent} did not answer a ping")
        return [self.outcome(ref) is not DIED for ref in refs]

    def shutdown(self) -> None:
        """Kills every actor this pool created. Idempotent."""
        for slot in self._slots:
            self._kill(slot)
        self._calls.clear()

    @staticmethod
    def _kill(slot: _Slot) -> None:
        if slot.actor is not None:
            try:
                ray.kill(slot.actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone is fine
                pass
            slot.actor = None
