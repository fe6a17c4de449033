"""A RayCollector's env configs: versioned like weights, one ``ray.put`` per push, acknowledged per worker.

:class:`EnvConfigs` is owned by the :class:`~tdscheme.collectors.driver.pool.WorkerPool`,
as its weight versions are: each push gets the next version (one integer per push,
whichever workers it goes to), is put once into Ray's object store and sent to each
worker's ``set_env_config`` (served in the actor's ``control`` group, so while it
collects); each worker acknowledges the version. A request made after a push waits for
it in the worker (``min_env_config_version``), a rebuilt worker starts with the newest
config it took (pushed and not refused), and the versions go into the collector's state.

Acknowledged or refused: a worker checks a config when it arrives wherever the env can
tell without applying it (its ``check_env_config``; :class:`~tdscheme.envs.EnvAttributes`
checks its attributes exist), so a config it cannot apply is refused by the
acknowledgement itself and :meth:`EnvConfigs.wait` raises it. A config the env raises on
only when applied (no check could see it) is refused then: the worker goes back to the
last config it applied and goes on collecting, and reports it with its next batch. Either
way the worker keeps its previous config (a rebuilt one too: never a restart loop), and a
refusal is a :class:`~tdscheme.errors.WorkerError` naming the worker and the env's error,
raised by every :meth:`EnvConfigs.wait` for that version and, once, by the next other
call that looks (a push, a batch request, ``stats()``).

The worker's half is :mod:`tdscheme.collectors.worker.env_config` over
:mod:`tdscheme.rollout.env_config` (what "apply at reset" means per env copy).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Sequence
from typing import Any

from tdscheme.errors import WorkerError
from tdscheme.rollout.env_config import EnvConfigPush
from tdscheme.runtime.actor_pool import DIED
from tdscheme.runtime.objects import put

__all__ = ["EnvConfigs"]


@dataclasses.dataclass
class _Worker:
    """One worker's env configs: the newest pushed (and its object), acknowledged, running."""

    ref: Any = None  # the newest push to it (a rebuilt worker starts with it)
    pushed: int = 0
    acked: int = 0
    acked_ref: Any = None
    pending: Any = None  # the acknowledgement in flight
    running: int = 0  # the oldest version its env copies ran at its latest batch
    # the pushes it acknowledged that it may go back to (a config its env raises on when
    # applied sends it back to the last one applied): none older than ``running``
    refs: dict[int, Any] = dataclasses.field(default_factory=dict)


class EnvConfigs:
    """The env configs of a pool's workers (see the module).

    Args:
        pool: the :class:`~tdscheme.collectors.driver.pool.WorkerPool` (its ``submit``,
            ``wait``, ``outcome``, ``active_ids`` and length).
    """

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        #: the newest version pushed (0: none)
        self.version = 0
        self.pushes = 0
        self.push_s = 0.0
        self._workers: list[_Worker] = []
        self._refusals: dict[int, list[WorkerError]] = {}  # version -> every worker's refusal
        self._unreported: list[tuple[int, WorkerError]] = []  # not raised by any call yet
        # a collector started in the background (start()) polls from its own thread while
        # the driver pushes and waits: each acknowledgement is read once, under the lock
        self._lock = threading.RLock()

    # -- what the pool asks ---------------------------------------------------------------

    def _worker(self, worker_id: int) -> _Worker:
        while len(self._workers) <= worker_id:  # a worker added to the pool runs the env as built
            self._workers.append(_Worker())
        return self._workers[worker_id]

    def start_kwargs(self, worker_id: int) -> dict[str, Any]:
        """The constructor argument of a worker (re)built now: the newest config pushed to it.

        The worker runs it from its first step: it counts as acknowledged.
        """
        with self._lock:
            worker = self._worker(worker_id)
            self.pool.forget([worker.pending])  # an acknowledgement of the actor it replaces
            worker.pending, worker.acked, worker.acked_ref = None, worker.pushed, worker.ref
            worker.refs[worker.acked] = worker.ref
            return {} if worker.ref is None else {"env_config": worker.ref}

    def min_version(self, worker_id: int) -> int:
        """The version a request to ``worker_id`` waits for: the newest pushed to it.

        Raises:
            WorkerError: an acknowledgement that arrived is an error (see :meth:`poll`).
        """
        if self._worker(worker_id).pending is not None:
            self.poll()  # a refused config is reported at the next request
        return self._workers[worker_id].pushed

    def on_batch(
        self, worker_id: int, env_config_version: int, refused: Sequence[tuple[int, int, str]] = ()
    ) -> None:
        """A batch arrived: its worker's env copies run ``env_config_version`` or newer.

        ``refused``: configs its env raised on when applied, ``(version, version gone back
        to, error)``: recorded as refusals (see :meth:`poll`), and the worker's newest
        config (a rebuilt worker's) is the one it went back to.
        """
        with self._lock:
            worker = self._worker(worker_id)
            for version, back, message in refused:
                err = WorkerError(worker_id, f"{message} (when applied)", method="set_env_config")
                self._record_refusal(version, err)
                if worker.pushed == version:  # no newer push since: it runs ``back``
                    worker.ref = worker.acked_ref = worker.refs.get(back)
                    worker.pushed = worker.acked = back
            worker.running = env_config_version
            worker.refs = {v: r for v, r in worker.refs.items() if v >= env_config_version}

    # -- pushes ---------------------------------------------------------------------------

    def push(self, push: EnvConfigPush, worker_ids: list[int]) -> None:
        """Sends ``push`` (checked, version :attr:`version` + 1) to ``worker_ids``: one ``ray.put``.

        What ``RayCollector.set_env_config`` does after its checks
        (:func:`~tdscheme.rollout.env_config_push.set_env_config_method`); its docstring
        says what a push means.

        Raises:
            WorkerError: an earlier push was refused by a worker (named) and no call
                raised it yet.
        """
        self.poll()
        start = time.perf_counter()
        ids = [i for i in worker_ids if i not in self.pool.retired]
        ref = put(push, what=f"the env config {push.config!r} for workers {ids}")
        with self._lock:
            self.version = push.version
            for worker_id in ids:
                worker = self._worker(worker_id)
                worker.ref, worker.pushed = ref, push.version
                self.pool.forget([worker.pending])  # a newer version supersedes its ack
                worker.pending = self.pool.submit(worker_id, "set_env_config", ref)
            self.pushes += 1
            self.push_s += time.perf_counter() - start

    def poll(self, timeout_s: float = 0.0) -> None:
        """Records the acknowledgements that arrived within ``timeout_s``.

        A worker that died is rebuilt with its newest config when its next request
        reports the death.

        Raises:
            WorkerError: a worker refused a config not reported yet (a version that goes
                backwards, an env without the protocol, a config the env raised on, ...),
                named with the worker and its traceback. Each refusal is raised here once;
                :meth:`wait` raises it again whenever it waits for its version.
        """
        self._collect(timeout_s)
        self._raise_refused()

    def _collect(self, timeout_s: float) -> None:
        """Records the acknowledgements that arrived; keeps the refusals for :meth:`_raise_refused`."""
        with self._lock:
            pending = {w.pending: i for i, w in enumerate(self._workers) if w.pending is not None}
        if not pending:
            return
        ready = self.pool.wait(list(pending), num_returns=len(pending), timeout_s=timeout_s)
        with self._lock:
            for ref in ready:
                worker = self._workers[pending[ref]]
                if worker.pending is None or worker.pending != ref:
                    continue  # read by the other thread, or superseded by a newer push
                worker.pending = None
                try:
                    value = self.pool.outcome(ref)
                except WorkerError as err:
                    self._record_refusal(worker.pushed, err)
                    # it runs what it ran; a rebuilt worker too
                    worker.ref, worker.pushed = worker.acked_ref, worker.acked
                    continue
                if value is not DIED:
                    worker.acked, worker.acked_ref = max(worker.acked, value), worker.ref
                    worker.refs[worker.acked] = worker.ref

    def _record_refusal(self, version: int, err: WorkerError) -> None:
        """Keeps a refusal for every :meth:`wait` of ``version`` and for the next :meth:`poll`."""
        self._refusals.setdefault(version, []).append(err)
        self._unreported.append((version, err))

    def _raise_refused(self, version: int | None = None) -> None:
        """Raises one error for the refusals not reported yet (or every refusal of
        ``version``, however often asked), naming every worker that refused."""
        with self._lock:
            if version is None:
                refused, self._unreported = self._unreported, []
            else:
                refused = [(version, e) for e in self._refusals.get(version, [])]
                self._unreported = [(v, e) for v, e in self._unreported if v != version]
        if not refused:
            return
        version, err = refused[0]
        others = sorted({e.worker_id for _, e in refused} - {err.worker_id})
        also = f" (workers {others} too)" if others else ""
        raise WorkerError(
            err.worker_id, f"refused env config version {version}{also}: {err.message}",
            err.remote_traceback, method=err.method, remote_type=err.remote_type,
        )  # fmt: skip

    def wait(self, version: int | None = None, timeout_s: float = 60.0) -> list[int]:
        """Blocks until every worker pushed ``version`` (or newer) acknowledged it.

        A worker that died meanwhile is not waited for: its next request rebuilds it
        with the newest config it took.

        Args:
            version: a version ``set_env_config`` returned (``None``: the newest).
            timeout_s: the longest to wait.

        Returns:
            The version each worker acknowledged last.

        Raises:
            TimeoutError: some did not acknowledge in ``timeout_s`` (named).
            ValueError: ``version`` was never pushed.
            WorkerError: a worker refused it (named, with the env's error), at every call
                that waits for it, whichever call reported it before. A config the env
                raised on only when applied is known once its worker reported it with a
                batch; a wait before then returns.
        """
        version = self.version if version is None else version
        if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version:
            raise ValueError(f"version={version!r} is invalid; accepted: an int >= 0")
        if version > self.version:
            raise ValueError(
                f"version={version} is invalid; accepted: a version pushed (the newest is "
                f"{self.version})"
            )
        deadline = time.monotonic() + timeout_s
        while True:
            waiting = [
                i for i in self.pool.active_ids()
                if self._workers[i].pushed >= version and self._workers[i].acked < version
                and self._workers[i].pending is not None
            ]  # fmt: skip
            if not waiting:
                self._raise_refused(version)
                return self.acked_versions()
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(
                    f"workers {waiting} did not acknowledge env config version {version} in "
                    f"{timeout_s} s"
                )
            self._collect(timeout_s=min(left, 1.0))  # every refusal, then one error

    def acked_versions(self) -> list[int]:
        """The env-config version each worker acknowledged last."""
        return [w.acked for w in self._workers]

    def running_versions(self) -> list[int]:
        """Per worker: the oldest version its env copies ran at its latest batch."""
        return [w.running for w in self._workers]

    # -- state ------------------------------------------------------------------------------

    def check_load(self, versions: Sequence[int], driver_version: int) -> None:
        """Raises before a state with older versions than those already pushed is loaded.

        Args:
            versions: per worker, the env-config version the state holds.
            driver_version: the newest version of the state's collector.

        Raises:
            ValueError: a worker (named) would go back to an older version.
        """
        pushed = [self._worker(i).pushed for i in range(len(versions))]
        older = [(i, v) for i, (p, v) in enumerate(zip(pushed, versions, strict=True)) if v < p]
        if older or driver_version < self.version:
            named = ", ".join(f"worker {i}: version {v} < {pushed[i]} pushed" for i, v in older)
            raise ValueError(
                f"the state's env config versions go backwards ({named or 'collector'}: the "
                f"state's newest is {driver_version}, {self.version} was pushed already); "
                "versions only go forward: load it into a collector that pushed none newer"
            )

    def loaded(self, pushes: Sequence[EnvConfigPush | None], driver_version: int) -> None:
        """The workers loaded ``pushes`` (each a worker's env config or ``None``).

        Each is :meth:`EnvConfigPush.from_state` of a worker's state, decoded in the driver
        process, which imports the classes its ``__main__`` defines (a worker cannot).
        """
        self.version = max(self.version, driver_version)
        for i, push in enumerate(pushes):
            worker = self._worker(i)
            if push is None:
                continue
            worker.ref = worker.acked_ref = put(push, what=f"the env config of worker {i}")
            worker.pushed = worker.acked = worker.running = push.version
            worker.refs = {push.version: worker.ref}

    def shutdown(self) -> None:
        """Drops the objects held for rebuilt workers."""
        for worker in self._workers:
            worker.ref = worker.acked_ref = worker.pending = None
            worker.refs.clear()
