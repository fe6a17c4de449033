"""WorkerPool: the Ray actors behind a RayCollector, with restarts, weight pushes and liveness.

This is the only collectors module that calls ``.remote``, ``ray.get`` or ``ray.wait``.
A dead worker is rebuilt by the pool itself from its small :class:`WorkerSpec`
(not by Ray's ``max_restarts``, which re-runs the constructor with arguments
that may have been evicted), receives the current weights, policy version and a
fresh seed. An exception raised inside a worker becomes a :class:`WorkerError`
naming the worker, with the remote traceback.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from collections.abc import Iterable, Sequence
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from tdscheme.collectors.worker import WorkerBatch, WorkerSpec, remote_worker_class
from tdscheme.log_levels import driver_log_level
from tdscheme.torchrl_adapter import is_multi_collector

logger = logging.getLogger(__name__)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class WorkerError(RuntimeError):
    """An error raised inside a collector worker, re-raised on the driver.

    Attributes:
        worker_id: the worker that failed.
        remote_traceback: the traceback text from the worker process.
        role: how the message names the worker (subclasses for other actors change it).
    """

    role = "collector worker"

    def __init__(self, worker_id: int, message: str, remote_traceback: str = "") -> None:
        self.worker_id = worker_id
        self.remote_traceback = _ANSI.sub("", remote_traceback)
        text = f"{self.role} {worker_id}: {message}"
        if remote_traceback:
            text += f"\n--- remote traceback ({self.role} {worker_id}) ---\n{self.remote_traceback}"
        super().__init__(text)


@dataclasses.dataclass
class _Slot:
    """One worker position: its current actor and its history."""

    spec: WorkerSpec
    remote_config: dict[str, Any]
    actor: Any = None
    generation: int = 0
    restarts: int = 0
    acked_version: int = 0
    pushed_version: int = 0
    pending_ack: Any = None


class WorkerPool:
    """Owns the collector actors.

    Args:
        max_restarts: rebuilds allowed per worker before a :class:`WorkerError`.
        seed: base seed; worker ``i`` of generation ``g`` gets a distinct seed.
    """

    def __init__(self, *, max_restarts: int = 3, seed: int | None = None) -> None:
        self.max_restarts = max_restarts
        self.seed = seed
        self._slots: list[_Slot] = []
        self._refs: dict[Any, tuple[int, int]] = {}  # collect ref -> (worker id, generation)
        self._weights_ref: Any = None
        self._version = 0

    def __len__(self) -> int:
        return len(self._slots)

    # -- building ------------------------------------------------------------------

    def add(self, spec: WorkerSpec, remote_config: dict[str, Any]) -> int:
        """Starts one worker actor; returns its id (does not wait for it to be ready)."""
        slot = _Slot(spec=spec, remote_config=dict(remote_config), acked_version=self._version)
        self._slots.append(slot)
        worker_id = len(self._slots) - 1
        self._start(worker_id)
        return worker_id

    def _start(self, worker_id: int) -> None:
        slot = self._slots[worker_id]
        cls = remote_worker_class(**slot.remote_config)
        slot.actor = cls.remote(
            worker_id,
            slot.spec,
            seed=self.worker_seed(worker_id, slot.generation),
            weights=self._weights_ref,
            policy_version=self._version,
            log_level=driver_log_level(),
        )
        slot.acked_version = slot.pushed_version = self._version
        slot.pending_ack = None

    def worker_seed(self, worker_id: int, generation: int = 0) -> int | None:
        """The seed of a worker's ``generation``-th incarnation (``None`` when unseeded)."""
        return incarnation_seed(self.seed, worker_id, generation)

    def restart(self, worker_id: int, reason: str) -> None:
        """Replaces a dead worker with a fresh one (current weights, fresh seed).

        Raises:
            WorkerError: the worker has used up ``max_restarts``.
        """
        slot = self._slots[worker_id]
        if slot.restarts >= self.max_restarts:
            raise WorkerError(
                worker_id,
                f"died {slot.restarts + 1} times (max_restarts={self.max_restarts}); "
                f"last: {reason}",
            )
        logger.warning("restarting collector worker %d: %s", worker_id, reason)
        self._kill(slot)
        slot.restarts += 1
        slot.generation += 1
        self._start(worker_id)

    # -- collecting ----------------------------------------------------------------

    def collect(self, worker_id: int, batch_id: int) -> Any:
        """Asks a worker for a batch; returns the future to wait on."""
        slot = self._slots[worker_id]
        ref = slot.actor.collect.remote(batch_id, slot.pushed_version)
        self._refs[ref] = (worker_id, slot.generation)
        return ref

    def owner(self, ref: Any) -> int:
        """The worker id a collect future belongs to."""
        return self._refs[ref][0]

    def wait(self, refs: Sequence[Any], *, num_returns: int = 1, timeout_s: float) -> list[Any]:
        """The futures among ``refs`` that are done within ``timeout_s`` (at most ``num_returns``)."""
        if not refs:
            return []
        ready, _ = ray.wait(list(refs), num_returns=min(num_returns, len(refs)), timeout=timeout_s)
        return ready

    def result(self, ref: Any) -> WorkerBatch | None:
        """The batch behind a finished future, or ``None`` when its worker died.

        A dead worker is restarted (once per death, whichever of its futures
        reports it first).

        Raises:
            WorkerError: the env or policy raised inside the worker, the worker
                failed in its constructor, or it died more than ``max_restarts`` times.
        """
        worker_id, generation = self._refs.pop(ref)
        try:
            return ray.get(ref, timeout=60.0)
        except RayTaskError as err:
            raise WorkerError(
                worker_id, f"{type(err.cause).__name__}: {err.cause}", str(err)
            ) from None
        except RayActorError as err:
            if err.actor_init_failed:
                raise WorkerError(worker_id, "failed while starting", str(err)) from None
            if generation == self._slots[worker_id].generation:
                self.restart(worker_id, f"{type(err).__name__}: {err}")
            return None
        except GetTimeoutError:
            raise WorkerError(worker_id, "a finished batch could not be fetched in 60 s") from None

    def forget(self, refs: Iterable[Any]) -> None:
        """Drops futures the caller will not read (their batches are discarded)."""
        for ref in refs:
            self._refs.pop(ref, None)

    def preempt(self, worker_id: int, batch_id: int) -> None:
        """Asks a worker to cut batch ``batch_id`` short at its next step boundary."""
        self._slots[worker_id].actor.preempt.remote(batch_id)

    def check_alive(self, timeout_s: float = 30.0) -> list[int]:
        """Pings every worker; restarts the dead ones and returns their ids.

        Raises:
            WorkerError: a worker answers neither a ping nor a death within ``timeout_s``.
        """
        pings = {slot.actor.ping.remote(): i for i, slot in enumerate(self._slots)}
        ready, not_ready = ray.wait(list(pings), num_returns=len(pings), timeout=timeout_s)
        if not_ready:
            ids = sorted(pings[r] for r in not_ready)
            raise WorkerError(ids[0], f"workers {ids} did not answer a ping in {timeout_s} s")
        dead = []
        for ref in ready:
            try:
                ray.get(ref, timeout=timeout_s)
            except RayActorError as err:
                dead.append(pings[ref])
                self.restart(pings[ref], f"no answer to a ping: {err}")
        return dead

    # -- weights -------------------------------------------------------------------

    @property
    def version(self) -> int:
        """The newest policy version pushed."""
        return self._version

    def set_version(self, version: int) -> None:
        """Sets the policy version (when restoring a collector's state)."""
        self._version = version

    def push_weights(self, payload: Any, version: int, worker_ids: Sequence[int]) -> None:
        """Sends ``payload`` (one ``ray.put``) to ``worker_ids``; each acknowledges ``version``.

        Workers receive the weights even while collecting and run them from the
        next batch they start.
        """
        ref = ray.put(payload)
        self._weights_ref = ref
        self._version = version
        for worker_id in worker_ids:
            slot = self._slots[worker_id]
            slot.pending_ack = slot.actor.set_weights.remote(ref, version)
            slot.pushed_version = version

    def poll_acks(self, timeout_s: float = 0.0) -> None:
        """Records the acknowledgements that arrived within ``timeout_s``.

        Raises:
            WorkerError: a worker failed to load the weights.
        """
        acks = {slot.pending_ack: i for i, slot in enumerate(self._slots) if slot.pending_ack}
        if not acks:
            return
        ready, _ = ray.wait(list(acks), num_returns=len(acks), timeout=timeout_s)
        for ref in ready:
            worker_id = acks[ref]
            slot = self._slots[worker_id]
            slot.pending_ack = None
            try:
                slot.acked_version = ray.get(ref, timeout=timeout_s + 10.0)
            except RayTaskError as err:
                raise WorkerError(worker_id, "failed to load pushed weights", str(err)) from None
            except RayActorError:
                pass  # the next collect reports the death and the restart sends the weights

    def wait_for_weights(self, timeout_s: float) -> list[int]:
        """Blocks until every worker acknowledged its last push; returns the acked versions.

        Raises:
            TimeoutError: some acknowledgements did not arrive in ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        while any(slot.pending_ack for slot in self._slots):
            left = deadline - time.monotonic()
            if left <= 0:
                waiting = [i for i, s in enumerate(self._slots) if s.pending_ack]
                raise TimeoutError(
                    f"workers {waiting} did not acknowledge weights in {timeout_s} s"
                )
            self.poll_acks(timeout_s=min(left, 1.0))
        return self.acked_versions()

    def acked_versions(self) -> list[int]:
        """The policy version each worker acknowledged last."""
        return [slot.acked_version for slot in self._slots]

    def actors(self) -> list[Any]:
        """The current actor handle of every worker."""
        return [slot.actor for slot in self._slots]

    def restarts(self) -> list[int]:
        """Restarts per worker."""
        return [slot.restarts for slot in self._slots]

    def nodes(self, timeout_s: float = 30.0) -> list[str]:
        """The Ray node id each worker runs on."""
        return ray.get(
            [
                slot.actor.__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id())
                for slot in self._slots
            ],
            timeout=timeout_s,
        )

    # -- other calls on every worker -----------------------------------------------

    def call_all(self, method: str, args_per_worker: Sequence[tuple], timeout_s: float) -> list:
        """Calls ``method`` on every worker with its own args and returns the results in order.

        Raises:
            WorkerError: a worker raised.
        """
        refs = [
            getattr(slot.actor, method).remote(*args)
            for slot, args in zip(self._slots, args_per_worker, strict=True)
        ]
        results = []
        for worker_id, ref in enumerate(refs):
            try:
                results.append(ray.get(ref, timeout=timeout_s))
            except RayTaskError as err:
                raise WorkerError(worker_id, f"{method} failed", str(err)) from None
        return results

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Kills every actor this pool created. Idempotent.

        Workers whose collector runs env subprocesses are first asked to shut
        down (for up to ``timeout_s``) so that those subprocesses exit too.
        """
        graceful = [
            slot.actor.shutdown.remote()
            for slot in self._slots
            if slot.actor is not None and _has_subprocesses(slot.spec)
        ]
        if graceful:
            ray.wait(graceful, num_returns=len(graceful), timeout=timeout_s)
        for slot in self._slots:
            self._kill(slot)
        self._refs.clear()
        self._weights_ref = None

    @staticmethod
    def _kill(slot: _Slot) -> None:
        if slot.actor is not None:
            try:
                ray.kill(slot.actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone is fine
                pass
            slot.actor = None


def _has_subprocesses(spec: WorkerSpec) -> bool:
    return spec.num_workers_per_collector > 1 or is_multi_collector(spec.collector_class)


def incarnation_seed(seed: int | None, worker_id: int, generation: int = 0) -> int | None:
    """A distinct, reproducible seed per worker and per restart (``None`` when unseeded).

    Example:
        >>> incarnation_seed(7, 0), incarnation_seed(7, 1) != incarnation_seed(7, 0)
        (7, True)
    """
    if seed is None:
        return None
    return (seed + 7919 * worker_id + 104729 * generation) % (2**31 - 1)
