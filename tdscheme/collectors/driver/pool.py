"""WorkerPool: the collector actors, with restarts, weight pushes and liveness (the driver's Ray caller).

Slots, restarts, bounded calls and remote errors come from
:class:`~tdscheme.runtime.actor_pool.ActorPool`; this pool adds the collector's own calls: batch
requests, preemption, weight and env-config pushes and their acknowledgements, and a graceful
shutdown for collectors that run env subprocesses. A dead worker is rebuilt from its
:class:`WorkerSpec` with the current weights, version and env config, and a fresh seed.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import ray
from ray.exceptions import RayActorError, RayTaskError

from tdscheme.collectors.driver.env_config import EnvConfigs
from tdscheme.collectors.driver.liveness import HUNG
from tdscheme.collectors.settings.specs import WorkerBatch, WorkerSpec
from tdscheme.errors import ACTOR_DIED, WorkerError
from tdscheme.runtime.actor_pool import DIED, ActorPool

__all__ = ["WorkerPool"]

logger = logging.getLogger(__name__)

#: Trajectory ids a rebuilt worker skips past its predecessor's last reply: no batch starts
#: this many trajectories (torchrl counts them in an int32: ~2,000 restarts fit).
_TRAJ_ID_MARGIN = 2**20


@dataclasses.dataclass
class _Versions:
    """A worker's weight versions: pushed to it, acknowledged by it, and the ack in flight."""

    acked: int = 0
    pushed: int = 0
    pending_ack: Any = None


class WorkerPool(ActorPool):
    """Owns the collector actors.

    Args:
        actor_class: the worker class each actor runs (a ``CollectorWorker``; a
            RayCollector's subclass also answers torchrl's calls).
        max_restarts: rebuilds allowed per worker before a :class:`WorkerError`.
        seed: base seed; worker ``i`` after ``g`` restarts gets a distinct seed.
        min_workers: elastic: a worker past ``max_restarts`` is retired instead of
            raising, as long as this many workers remain (``None``: only one that
            hung, while another worker delivers frames).
    """

    error_class = WorkerError
    ready_method = "started"  # a started worker says its batch size and fast-path status

    def __init__(
        self,
        actor_class: type,
        *,
        max_restarts: int = 3,
        seed: int | None = None,
        min_workers: int | None = None,
    ) -> None:
        super().__init__(actor_class, max_restarts=max_restarts, seed=seed)
        self.min_workers = min_workers
        self._versions: list[_Versions] = []
        self._weights_ref: Any = None
        self._version = 0
        self._batch_frames: dict[int, int | None] = {}
        self._fast_path: dict[int, bool | str | None] = {}
        self._rebuilt: dict[int, Any] = {}  # worker -> its rebuilt actor's started() future
        self._next_traj_ids: dict[int, int] = {}  # worker -> largest next_traj_id it replied
        self._frames_done: Counter = Counter()  # worker -> frames it collected, all actors
        self.restart_reasons: dict[int, str] = {}  # worker -> why it was last rebuilt
        self.env_configs = EnvConfigs(self)  # pushed, acknowledged, given to rebuilt workers

    # -- building ------------------------------------------------------------------

    def add(self, spec: WorkerSpec, remote_config: dict[str, Any]) -> int:
        """Starts one worker actor; returns its id (does not wait for it to be ready)."""
        worker_id = self.add_slot(spec, remote_config)
        self._versions.append(_Versions())
        self._start_worker(worker_id)
        return worker_id

    def wait_started(
        self, worker_ids: Sequence[int], *, timeout_s: float, argument: str
    ) -> list[Any]:
        """Waits until the workers are built; keeps each one's batch size and fast-path status.

        Their answers are ``CollectorWorker.started()``; workers that run torchrl's
        rollout are a warning, one line per reason (once: a rebuilt worker with the same
        reason is not logged again).
        """
        answers = super().wait_started(worker_ids, timeout_s=timeout_s, argument=argument)
        self._keep_started(dict(zip(worker_ids, answers, strict=True)))
        return answers

    def _keep_started(self, answers: dict[int, Any]) -> None:
        changed: dict[int, bool | str | None] = {}
        for worker_id, answer in answers.items():
            if answer is DIED:  # not known; a rebuilt worker keeps what its spec gave before
                self._batch_frames.setdefault(worker_id, None)
                self._fast_path.setdefault(worker_id, None)
                continue
            self._batch_frames[worker_id] = answer["batch_frames"]
            if self._fast_path.get(worker_id) != answer["fast_path"]:
                changed[worker_id] = answer["fast_path"]
            self._fast_path[worker_id] = answer["fast_path"]
        log_torchrl_rollouts(changed)

    def fast_path(self) -> list[bool | str | None]:
        """Per worker: ``True`` on tdscheme's lean rollout, else why torchrl's rollout runs.

        Said by each worker when it started (``CollectorWorker.started``), a rebuilt one's read when
        it has arrived (never waited for); ``None``: not known (the worker died before answering).
        """
        done = self.wait(list(self._rebuilt.values()), num_returns=len(self._rebuilt), timeout_s=0)
        answers = {}
        for worker_id, ref in list(self._rebuilt.items()):
            if ref in done:
                del self._rebuilt[worker_id]
                try:
                    answers[worker_id] = self.outcome(ref)
                except WorkerError:  # its next batch request reports the failure
                    answers[worker_id] = DIED
        self._keep_started(answers)
        return [self._fast_path.get(i) for i in range(len(self))]

    def batch_frames(self, worker_id: int) -> int | None:
        """Frames one whole batch of ``worker_id`` has (``None``: not fixed, or not known).

        Said by the worker when it started (``CollectorWorker.batch_frames``); a rebuilt one keeps it.
        """
        return self._batch_frames.get(worker_id)

    def _start_worker(self, worker_id: int) -> None:
        self.start(worker_id, **self._current(worker_id))
        self._versions[worker_id] = _Versions(acked=self._version, pushed=self._version)

    def _current(self, worker_id: int) -> dict[str, Any]:  # a (re)built worker's start
        kwargs = {**self.env_configs.start_kwargs(worker_id), "own_process": True}
        return {"weights": self._weights_ref, "policy_version": self._version, **kwargs}

    def restart(self, worker_id: int, reason: str) -> None:  # type: ignore[override]
        """Replaces a dead worker: current weights and version, fresh seed, init_random_frames left.

        A worker past ``max_restarts`` is retired instead (logged; :attr:`retired`) while
        at least ``min_workers`` others remain; without ``min_workers``, only one whose last
        actor hung, while another worker that delivered frames goes on (:meth:`_retire_floor`).

        Raises:
            WorkerError: the worker has used up ``max_restarts`` (and cannot retire).
        """
        self.restart_reasons[worker_id] = reason
        # past every trajectory id the dead actor used: its last reply's, and a margin (its write
        first_traj_id = self._next_traj_ids.get(worker_id, 0) + _TRAJ_ID_MARGIN  # after that)
        try:
            super().restart(
                worker_id, reason, first_traj_id=first_traj_id,
                frames_done=self._frames_done[worker_id], **self._current(worker_id),
            )  # fmt: skip
        except WorkerError as err:
            floor, why = self._retire_floor(worker_id, reason)
            if floor is None or len(self.active_ids()) - 1 < floor:
                raise
            self.retire(worker_id, f"{err.message} ({why})")
            return
        self._versions[worker_id] = _Versions(acked=self._version, pushed=self._version)
        self.forget([self._rebuilt.pop(worker_id, None)])
        self._rebuilt[worker_id] = self.submit(worker_id, self.ready_method)  # it reports again

    def _retire_floor(self, worker_id: int, reason: str) -> tuple[int | None, str]:
        """How many workers must go on for ``worker_id``, past ``max_restarts``, to retire (and why).

        ``min_workers`` when set. Without it, a worker whose last actor hung retires while one
        other worker that delivered frames goes on (as RLlib's env runners keep sampling on the
        healthy ones): a hang has no traceback to show, and the hung worker's rests
        (``BatchFlow``) already left its frames to the others. A worker whose env or policy
        raises (or crashes) still ends the run: its error is the user's to see. ``None``: it
        cannot retire.
        """
        if self.min_workers is not None:
            return self.min_workers, f"min_workers={self.min_workers}"
        delivering = [w for w in self.active_ids() if w != worker_id and self._frames_done[w]]
        if reason.startswith(HUNG) and delivering:
            return 1, f"it hangs at every rebuild; workers {delivering} deliver"
        return None, ""

    def _restart_after_error(self, worker_id: int, err: WorkerError) -> None:
        """Rebuilds a worker whose env or policy raised; past ``max_restarts``, raises ``err``
        (its message and remote traceback) with the count."""
        try:
            self.restart(worker_id, err.message)  # with min_workers, past max_restarts: retired
        except WorkerError:
            failures = self.restarts()[worker_id] + 1
            raise WorkerError(
                worker_id,
                f"{err.message} (failed {failures} times, max_restarts={self.max_restarts})",
                err.remote_traceback, method=err.method,
            ) from None  # fmt: skip

    # -- collecting ----------------------------------------------------------------

    def collect(self, worker_id: int, batch_id: int, max_frames: int | None = None) -> Any:
        """Asks a worker for a batch (at most ``max_frames`` written); returns the future."""
        env_config = self.env_configs.min_version(worker_id)
        pushed = self._versions[worker_id].pushed
        return self.submit(worker_id, "collect", batch_id, pushed, max_frames, env_config)

    def result(self, ref: Any) -> WorkerBatch | None:
        """The batch behind a finished future, or ``None`` when its worker died or raised.

        A dead worker is restarted (once per death, whichever of its futures reports it
        first). So is one whose env or policy raised while collecting (a simulator that
        crashes now and then, as RLlib's ``restart_failed_env_runners``): the exception is
        logged and the worker rebuilt with a fresh seed, within the same ``max_restarts``.
        A Ray-held replay buffer found dead (``ReplayBufferDied``) raises at once.

        Raises:
            WorkerError: the worker failed in its constructor, or it died (or its env
                or policy raised) more than ``max_restarts`` times; for an exception,
                with the last remote traceback.
        """
        worker_id, current = self.owner(ref), self.is_current(ref)
        try:
            value = self.outcome(ref)
        except WorkerError as err:
            # a dead replay buffer is not the worker's fault: a new one would meet it too
            if err.method != "collect" or err.remote_type == "ReplayBufferDied":
                raise
            if current:
                self._restart_after_error(worker_id, err)
            return None
        if value is DIED:
            if current:
                self.restart(worker_id, self.last_death.get(worker_id, "died"))
            return None
        self._frames_done[worker_id] += value.stepped
        self.env_configs.on_batch(worker_id, value.env_config_version, value.env_config_refused)
        if value.next_traj_id is not None:
            seen = self._next_traj_ids.get(worker_id, 0)
            self._next_traj_ids[worker_id] = max(seen, value.next_traj_id)
        return value

    def seed_all(self, seed: int, static_seed: bool = False, *, timeout_s: float = 600.0) -> int:
        """Seeds every worker distinctly and reproducibly from ``seed``.

        Worker ``i`` gets its own seed derived from ``seed`` (restarted workers a
        fresh one), where torchrl chains one seed through the workers in turn.

        Args:
            seed: the base seed.
            static_seed: torchrl's: each worker's env copies all get that worker's seed.

        Returns:
            As torchrl's: the seed to use next, the one the last worker's torchrl
            collector chained to after its own.

        Raises:
            TypeError: ``seed`` is not an int.
        """
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed must be an int, got {seed!r}")
        self.seed = seed
        seeds = [(self.worker_seed(i), static_seed) for i in range(len(self))]
        return int(self.call_every_worker("set_seed", seeds, timeout_s)[-1])

    def call_every_worker(
        self, method: str, args_per_worker: Sequence[tuple], timeout_s: float
    ) -> list[Any]:
        """:meth:`call_all` of a call that asking twice does not change; a death is a restart.

        ``state_dict``, ``load_state_dict`` and ``set_seed``: a worker that dies during
        one (killed while a checkpoint is taken, as the off-policy soak found) is rebuilt
        as any dead worker and the call is made again on every worker. A user's own
        remote calls (``map_fn``) are never asked twice: they may not be idempotent.

        Raises:
            WorkerError: a worker raised or did not answer in ``timeout_s``, or died past
                ``max_restarts``.
        """
        while True:  # each death is a restart, and restarts end at max_restarts
            try:
                return self.call_all(method, args_per_worker, timeout_s=timeout_s)
            except WorkerError as err:
                if err.remote_type != ACTOR_DIED:
                    raise
                self.restart(err.worker_id, f"died during {method} ({err})")

    def preempt(self, worker_id: int, batch_id: int) -> None:
        """Asks a worker to cut batch ``batch_id`` short at its next step boundary."""
        self._slots[worker_id].actor.preempt.remote(batch_id)

    def check_alive(self, timeout_s: float = 30.0) -> list[int]:
        """Pings every worker; restarts the dead ones and returns their ids.

        Raises:
            WorkerError: a worker answers neither a ping nor a death within ``timeout_s``.
        """
        answers = self.alive(timeout_s)
        dead = [i for i in self.active_ids() if not answers[i]]
        for worker_id in dead:
            self.restart(worker_id, f"no answer to a ping: {self.last_death.get(worker_id)}")
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
            if worker_id in self.retired:
                continue
            versions = self._versions[worker_id]
            versions.pending_ack = self._slots[worker_id].actor.set_weights.remote(ref, version)
            versions.pushed = version

    def poll_acks(self, timeout_s: float = 0.0) -> None:
        """Records the acknowledgements that arrived within ``timeout_s``.

        Raises:
            WorkerError: a worker failed to load the weights.
        """
        acks = {v.pending_ack: i for i, v in enumerate(self._versions) if v.pending_ack}
        if not acks:
            return
        ready, _ = ray.wait(list(acks), num_returns=len(acks), timeout=timeout_s)
        for ref in ready:
            versions = self._versions[acks[ref]]
            if versions.pending_ack != ref:
                continue  # read by start()'s thread (it polls too), or a newer push superseded it
            versions.pending_ack = None
            try:
                versions.acked = max(versions.acked, ray.get(ref, timeout=timeout_s + 10.0))
            except RayTaskError as err:
                raise WorkerError(acks[ref], "failed to load pushed weights", str(err)) from None
            except RayActorError:
                pass  # the next collect reports the death and the restart sends the weights

    def wait_for_weights(self, timeout_s: float) -> list[int]:
        """Blocks until every worker acknowledged its last push; returns the acked versions.

        Raises:
            TimeoutError: some acknowledgements did not arrive in ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        while any(v.pending_ack for v in self._versions):
            left = deadline - time.monotonic()
            if left <= 0:
                waiting = [i for i, v in enumerate(self._versions) if v.pending_ack]
                raise TimeoutError(
                    f"workers {waiting} did not acknowledge weights in {timeout_s} s"
                )
            self.poll_acks(timeout_s=min(left, 1.0))
        return self.acked_versions()

    def acked_versions(self) -> list[int]:
        """The policy version each worker acknowledged last."""
        return [v.acked for v in self._versions]

    def nodes(self, timeout_s: float = 30.0) -> list[str]:
        """The Ray node id each worker runs on."""
        refs = [s.actor.__ray_call__.remote(_node_id) for s in self._slots if s.actor is not None]
        return ray.get(refs, timeout=timeout_s)

    # -- lifecycle -----------------------------------------------------------------

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Kills every actor this pool created. Idempotent.

        Workers whose collector runs env subprocesses are first asked to shut
        down (for up to ``timeout_s``) so that those subprocesses exit too.
        """
        graceful = [
            slot.actor.shutdown.remote()
            for slot in self._slots
            if slot.actor is not None and slot.spec.runs_subprocesses
        ]
        if graceful:
            ray.wait(graceful, num_returns=len(graceful), timeout=timeout_s)
        super().shutdown()
        self._weights_ref = None
        self.env_configs.shutdown()
        self._rebuilt.clear()


def log_torchrl_rollouts(fast_path: dict[int, bool | str | None]) -> None:
    """Warns, one line per reason, of workers that newly run torchrl's rollout (slower)."""
    by_reason: dict[str, list[int]] = {}
    for worker_id, status in sorted(fast_path.items()):
        if isinstance(status, str):
            by_reason.setdefault(status, []).append(worker_id)
    for reason, worker_ids in by_reason.items():
        logger.warning("collector workers %s run off the fast path: %s", worker_ids, reason)


def _node_id(_: Any) -> str:  # run inside a worker's actor
    return ray.get_runtime_context().get_node_id()
