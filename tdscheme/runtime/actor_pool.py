"""ActorPool: slots of Ray actors built from small specs, with restarts, bounded calls and errors.

The collector pool (:mod:`tdscheme.collectors.driver.pool`) and the gradient-worker pool
(:mod:`tdscheme.gradient_workers.pool`) are thin users of this class: each adds
what its actors need (weight pushes, acknowledgements, graceful shutdown) on top
of what they share here:

* **slots**: one per worker position, holding the spec the actor is built from,
  its Ray options, the current actor and its restart count;
* **restarts** by the pool itself from the small spec (not Ray's
  ``max_restarts``, which re-runs the constructor with arguments that may have
  been evicted), each new actor with its own seed (:func:`restart_seed`);
* **bounded calls**: every ``ray.get`` and ``ray.wait`` has a timeout;
* **remote errors**: an exception raised inside an actor becomes a
  :class:`WorkerError` naming the worker, with the remote traceback; a dead actor
  is reported as :data:`DIED`, for the caller to restart.

Actor classes are plain Python classes; the pool wraps them with ``ray.remote``
(with a ``control`` concurrency group for calls served while a long call runs).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Iterable, Sequence
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from tdscheme.errors import ACTOR_DIED, WorkerError
from tdscheme.log_levels import driver_log_level
from tdscheme.runtime import placement
from tdscheme.runtime.error_text import last_exception_line, one_line

__all__ = ["DIED", "FETCH_TIMEOUT_S", "ActorPool", "WorkerError", "restart_seed"]

logger = logging.getLogger(__name__)

#: Seconds to fetch the value of a call that Ray already reported finished.
FETCH_TIMEOUT_S = 60.0

#: What :meth:`ActorPool.outcome` returns for a call whose actor died.
DIED = object()


def restart_seed(seed: int | None, worker_id: int, restarts: int = 0) -> int | None:
    """A distinct, reproducible seed per worker and per restart (``None`` when unseeded).

    Example:
        >>> restart_seed(7, 0), restart_seed(7, 1) != restart_seed(7, 0)
        (7, True)
    """
    if seed is None:
        return None
    return (seed + 7919 * worker_id + 104729 * restarts) % (2**31 - 1)


@functools.cache
def remote_class(actor_class: type) -> Any:
    """``ray.remote(actor_class)`` with a ``control`` concurrency group, built once per process.

    Every ``ray.remote(...)`` call would export the class to the cluster again.
    """
    return ray.remote(concurrency_groups={"control": 1})(actor_class)


@dataclasses.dataclass
class ActorSlot:
    """One worker position: the spec its actors are built from, the current actor, its history."""

    spec: Any
    options: dict[str, Any]
    actor: Any = None
    restarts: int = 0


class ActorPool:
    """Owns the actors of one kind; subclasses add what their actors need.

    Actor ``i`` is built as ``actor_class(i, spec, seed=..., log_level=..., **start_kwargs)``
    (``log_level``: the driver's, see :mod:`tdscheme.log_levels`).

    Args:
        actor_class: the plain Python class of the actors.
        max_restarts: rebuilds allowed per worker before an ``error_class`` error.
        seed: base seed; worker ``i`` after ``g`` restarts gets
            :func:`restart_seed` ``(seed, i, g)``.
    """

    #: The error raised for a worker's failure.
    error_class: type[WorkerError] = WorkerError
    #: The method :meth:`wait_started` calls: answered once the actor is built.
    ready_method: str = "ping"

    def __init__(
        self, actor_class: type, *, max_restarts: int = 3, seed: int | None = None
    ) -> None:
        self._remote_class = remote_class(actor_class)
        self.max_restarts = max_restarts
        self.seed = seed
        self._slots: list[ActorSlot] = []
        self._calls: dict[Any, tuple[int, int, str]] = {}  # ref -> (worker, restarts, method)
        self.last_death: dict[int, str] = {}  # worker id -> why its last actor died
        #: workers retired past ``max_restarts`` (elastic pools); never called again
        self.retired: set[int] = set()
        self._killed: dict[int, tuple[int, str]] = {}  # worker -> (restarts, why) by kill()

    def __len__(self) -> int:
        return len(self._slots)

    # -- actors ----------------------------------------------------------------------------

    def add_slot(self, spec: Any, options: dict[str, Any]) -> int:
        """Adds a worker position (no actor yet); returns its id."""
        self._slots.append(ActorSlot(spec=spec, options=dict(options)))
        return len(self._slots) - 1

    def start(self, worker_id: int, **start_kwargs: Any) -> None:
        """Starts the actor of ``worker_id`` (does not wait for it to be ready)."""
        slot = self._slots[worker_id]
        slot.actor = self._remote_class.options(**slot.options).remote(
            worker_id,
            slot.spec,
            seed=self.worker_seed(worker_id, slot.restarts),
            log_level=driver_log_level(),
            **start_kwargs,
        )

    def check_fits(self, options: Sequence[dict[str, Any]], *, argument: str) -> None:
        """Raises before any actor starts if Ray could never place actors with ``options``.

        Args:
            options: the Ray options of every actor about to be started.
            argument: the user's argument(s) that set them, for the message.

        Raises:
            PlacementError: see :func:`tdscheme.runtime.placement.check_fits`.
        """
        what = f"{len(options)} {self.error_class.role}{'s' if len(options) != 1 else ''}"
        placement.check_fits(options, what=what, argument=argument)

    def wait_started(
        self, worker_ids: Sequence[int], *, timeout_s: float, argument: str
    ) -> list[Any]:
        """Waits until the actors of ``worker_ids`` are placed and built (answer ``ready_method``).

        Returns:
            Each actor's answer to ``ready_method``, in order (``DIED`` for one that died).

        Raises:
            PlacementError: some did not start within ``timeout_s`` (``actor_start_timeout_s``).
            WorkerError: (``error_class``) a constructor raised: the first line names
                the exception, the remote traceback follows; it is not restarted.
        """
        refs = [self.submit(worker_id, self.ready_method) for worker_id in worker_ids]
        try:
            placement.wait_started(
                refs, timeout_s=timeout_s, what=self.error_class.role, argument=argument,
                ids=list(worker_ids),
            )  # fmt: skip
        except placement.PlacementError:
            self.forget(refs)
            raise
        # A constructor that raised (a bad env, a policy that does not fit it) is the
        # user's mistake, the same after every restart: report it now, never restart it.
        # (A worker that died is left to the caller's next call, which restarts it.)
        return [self.outcome(ref) for ref in refs]

    def worker_seed(self, worker_id: int, restarts: int = 0) -> int | None:
        """The seed of a worker's actor after ``restarts`` restarts (``None`` when unseeded)."""
        return restart_seed(self.seed, worker_id, restarts)

    def restart(self, worker_id: int, reason: str, **start_kwargs: Any) -> None:
        """Replaces a dead worker's actor with a fresh one (one more restart, a fresh seed).

        Raises:
            WorkerError: (``error_class``) the worker has used up ``max_restarts``.
        """
        slot = self._slots[worker_id]
        if slot.restarts >= self.max_restarts:
            raise self.error_class(
                worker_id,
                f"died {slot.restarts + 1} times (max_restarts={self.max_restarts}); "
                f"last: {reason}",
            )
        logger.warning("restarting %s %d: %s", self.error_class.role, worker_id, one_line(reason))
        self._kill(slot)
        slot.restarts += 1
        self.start(worker_id, **start_kwargs)

    def active_ids(self) -> list[int]:
        """The workers not retired, in order."""
        return [i for i in range(len(self._slots)) if i not in self.retired]

    def retire(self, worker_id: int, reason: str) -> None:
        """Kills a worker's actor for good; the pool stops calling it (elastic runs)."""
        logger.warning(
            "retiring %s %d: %s; %d of %d workers go on",
            self.error_class.role, worker_id, reason,
            len(self._slots) - len(self.retired) - 1, len(self._slots),
        )  # fmt: skip
        self.retired.add(worker_id)
        self._kill(self._slots[worker_id])

    def kill(self, worker_id: int, reason: str) -> None:
        """Kills a worker's current actor (e.g. a hung one); its futures then report a death.

        The caller's next read of one of them restarts it (as for any death).
        """
        slot = self._slots[worker_id]
        self._killed[worker_id] = (slot.restarts, reason)
        if slot.actor is not None:
            try:
                ray.kill(slot.actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone is fine
                pass

    def actors(self) -> list[Any]:
        """The current actor handle of every worker (for custom calls; do not kill them)."""
        return [slot.actor for slot in self._slots]

    def specs(self) -> list[Any]:
        """The spec each worker is built from."""
        return [slot.spec for slot in self._slots]

    def restart_count(self, worker_id: int) -> int:
        """How many times ``worker_id``'s actor was rebuilt (its restart count)."""
        return self._slots[worker_id].restarts

    def restarts(self) -> list[int]:
        """Restarts per worker."""
        return [slot.restarts for slot in self._slots]

    # -- calls -------------------------------------------------------------------------------

    def submit(self, worker_id: int, method: str, *args: Any) -> Any:
        """Calls ``method(*args)`` on a worker's current actor; returns the future."""
        slot = self._slots[worker_id]
        ref = getattr(slot.actor, method).remote(*args)
        self._calls[ref] = (worker_id, slot.restarts, method)
        return ref

    def owner(self, ref: Any) -> int:
        """The worker a pending future belongs to."""
        return self._calls[ref][0]

    def is_current(self, ref: Any) -> bool:
        """Whether a pending future was sent to its worker's current actor."""
        worker_id, restarts, _ = self._calls[ref]
        return restarts == self._slots[worker_id].restarts

    def forget(self, refs: Iterable[Any]) -> None:
        """Drops futures the caller will not read (their values are discarded)."""
        for ref in refs:
            self._calls.pop(ref, None)

    def wait(self, refs: Sequence[Any], *, num_returns: int = 1, timeout_s: float) -> list[Any]:
        """The futures among ``refs`` done within ``timeout_s`` (at most ``num_returns``)."""
        if not refs:
            return []
        ready, _ = ray.wait(list(refs), num_returns=min(num_returns, len(refs)), timeout=timeout_s)
        return ready

    def outcome(self, ref: Any) -> Any:
        """The value of a finished future; :data:`DIED` when its actor died.

        The reason of a death is kept in ``last_death[worker_id]``.

        Raises:
            WorkerError: (``error_class``) the call raised inside the actor, the
                actor failed in its constructor, or the value could not be fetched
                within :data:`FETCH_TIMEOUT_S`.
        """
        worker_id, restarts, method = self._calls.pop(ref)
        try:
            return ray.get(ref, timeout=FETCH_TIMEOUT_S)
        except RayTaskError as err:
            raise self.error_class.raised_in(worker_id, method, err) from None
        except RayActorError as err:
            if err.actor_init_failed:
                text = str(err)
                raise self.error_class(
                    worker_id, f"failed while starting: {last_exception_line(text)}", text
                ) from None
            killed = self._killed.get(worker_id)
            if killed is not None and killed[0] == restarts:
                self.last_death[worker_id] = killed[1]
            else:
                self.last_death[worker_id] = f"{type(err).__name__}: {err}"
            return DIED
        except GetTimeoutError:
            raise self.error_class(
                worker_id,
                f"the finished {method} result could not be fetched in {FETCH_TIMEOUT_S:g} s",
            ) from None

    def call_all(self, method: str, args_per_worker: Sequence[tuple], timeout_s: float) -> list:
        """Calls ``method`` on every worker with its own args; returns the values in order.

        Raises:
            WorkerError: (``error_class``) a worker raised, died, or did not
                answer in ``timeout_s``.
        """
        pairs = list(zip(range(len(self._slots)), args_per_worker, strict=True))
        active = [(worker_id, args) for worker_id, args in pairs if worker_id not in self.retired]
        refs = [self.submit(worker_id, method, *args) for worker_id, args in active]
        values = dict(
            zip([w for w, _ in active], self._values(refs, method, timeout_s), strict=True)
        )
        return [values.get(worker_id) for worker_id in range(len(self._slots))]

    def call(self, worker_id: int, method: str, *args: Any, timeout_s: float) -> Any:
        """Calls ``method(*args)`` on one worker and returns its value.

        Raises:
            WorkerError: (``error_class``) the worker raised, died, or did not
                answer in ``timeout_s``.
        """
        return self._values([self.submit(worker_id, method, *args)], method, timeout_s)[0]

    def _values(self, refs: list[Any], method: str, timeout_s: float) -> list[Any]:
        ready = self.wait(refs, num_returns=len(refs), timeout_s=timeout_s)
        if len(ready) < len(refs):
            silent = [self.owner(ref) for ref in refs if ref not in ready]
            self.forget(refs)
            raise self.error_class(
                silent[0], f"workers {silent} did not finish {method} in {timeout_s} s"
            )
        values = []
        for ref in refs:
            worker_id = self.owner(ref)
            value = self.outcome(ref)
            if value is DIED:
                self.forget(refs)
                raise self.error_class(
                    worker_id, f"died during {method}", method=method, remote_type=ACTOR_DIED
                )
            values.append(value)
        return values

    def alive(self, timeout_s: float = 30.0) -> list[bool]:
        """Pings every worker: whether each is alive.

        Raises:
            WorkerError: (``error_class``) a worker answers neither a ping nor
                a death in ``timeout_s``.
        """
        active = self.active_ids()
        refs = [self.submit(worker_id, "ping") for worker_id in active]
        ready = self.wait(refs, num_returns=len(refs), timeout_s=timeout_s)
        if len(ready) < len(refs):
            silent = [self.owner(ref) for ref in refs if ref not in ready]
            self.forget(refs)
            raise self.error_class(
                silent[0], f"workers {silent} did not answer a ping in {timeout_s} s"
            )
        answers = dict(zip(active, [self.outcome(ref) is not DIED for ref in refs], strict=True))
        return [answers.get(worker_id, False) for worker_id in range(len(self._slots))]

    def answering(self, timeout_s: float) -> list[bool]:
        """Pings every worker: whether each answered within ``timeout_s`` (never raises).

        For monitoring: a dead, hung or failing worker is simply ``False``.
        """
        active = self.active_ids()
        refs = [self.submit(worker_id, "ping") for worker_id in active]
        ready = set(self.wait(refs, num_returns=len(refs), timeout_s=timeout_s))
        answers = dict.fromkeys(range(len(self._slots)), False)  # retired: never answer
        for worker_id, ref in zip(active, refs, strict=True):
            if ref not in ready:
                self.forget([ref])
                continue
            try:
                answers[worker_id] = self.outcome(ref) is not DIED
            except WorkerError:
                pass
        return list(answers.values())

    # -- lifecycle ---------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Kills every actor this pool created. Idempotent."""
        for slot in self._slots:
            self._kill(slot)
        self._calls.clear()

    @staticmethod
    def _kill(slot: ActorSlot) -> None:
        if slot.actor is not None:
            try:
                ray.kill(slot.actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone is fine
                pass
            slot.actor = None
