"""Liveness: workers report env steps; the driver declares a worker without progress hung.

One long batch timeout cannot tell a slow worker from a hung one. Instead each
:class:`~tdscheme.collectors.worker.CollectorWorker` counts its env steps
(:func:`~tdscheme.collectors.worker.progress.count_env_steps`) and answers ``progress()`` in its ``control``
concurrency group, so the driver reads it without waiting for the batch. The
driver's :class:`StallMonitor` probes the workers that have a request in flight
and reports those whose count has not moved for ``worker_stall_timeout_s`` (a
probe left unanswered counts as no progress); the flow then kills such a worker
and rebuilds it like a dead one, its batch counted as lost (RLlib's
``sample_timeout_s`` with its restart of failed env runners).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable
from typing import Any

from tdscheme.errors import WorkerError
from tdscheme.runtime.actor_pool import DIED

__all__ = ["HUNG", "StallMonitor"]

#: How the reason of a worker killed for want of progress begins.
HUNG = "hung"


@dataclasses.dataclass
class _Watch:
    restarts: int
    steps: int = -1  # the last count a probe read (-1: none yet)
    since: float = 0.0  # when the count last moved (or the watch began)


class StallMonitor:
    """Probes busy workers' progress without blocking; reports the ones that stalled.

    Args:
        pool: the worker pool (``submit``, ``wait``, ``outcome``, ``forget``,
            ``restarts``).
        timeout_s: ``worker_stall_timeout_s``.
        start_timeout_s: ``actor_start_timeout_s``: the longest silence of a
            worker's actor that never replied yet, to a probe or with a batch
            (a rebuilt actor being placed and built). Once it replied, any silence
            longer than ``timeout_s`` is a stall, in whichever request it falls.
    """

    def __init__(self, pool: Any, timeout_s: float, start_timeout_s: float) -> None:
        self.pool = pool
        self.timeout_s = timeout_s
        self.start_timeout_s = start_timeout_s
        #: seconds between two probes of one worker
        self.interval_s = min(max(timeout_s / 4, 0.05), 5.0)
        self._watches: dict[int, _Watch] = {}
        self._probes: dict[Any, tuple[int, int]] = {}  # ref -> (worker, restarts)
        self._probed_at: dict[int, float] = {}
        #: worker id -> the restart count whose actor replied (to a probe or with a batch): that
        #: actor is placed and built, so its silence is a stall in whichever request
        self._built: dict[int, int] = {}
        self._last_check = time.monotonic()

    def check(self, busy: Iterable[int]) -> list[int]:
        """Reads the answered probes, sends new ones; returns the busy workers that stalled.

        Only silence the monitor watched counts: after a gap between two checks (the
        driver trained, evaluated or checkpointed instead of waiting for batches; a
        learner-paced worker may have waited for it all along), every watch restarts.
        """
        now = time.monotonic()
        if now - self._last_check > 2 * self.interval_s:
            for watch in self._watches.values():
                watch.since = now
        self._last_check = now
        self._read_probes(now)
        busy = set(busy)
        for worker_id in list(self._watches):
            if worker_id not in busy:  # idle is not stalled: the clock restarts with a request
                del self._watches[worker_id]
        stalled = []
        for worker_id in sorted(busy):
            restarts = self.pool.restart_count(worker_id)
            watch = self._watches.get(worker_id)
            if watch is None or watch.restarts != restarts:
                watch = self._watches[worker_id] = _Watch(restarts, since=now)
            built = self._built.get(worker_id) == restarts
            limit = self.timeout_s if built else max(self.timeout_s, self.start_timeout_s)
            if now - watch.since > limit:
                stalled.append(worker_id)
                del self._watches[worker_id]
                continue
            self._probe(worker_id, restarts, now)
        return stalled

    def delivered(self, worker_id: int, restarts: int) -> None:
        """A batch of the worker's actor after ``restarts`` restarts arrived: it is built, and that is progress."""
        self.built(worker_id, restarts)
        watch = self._watches.get(worker_id)
        if watch is not None and watch.restarts == restarts:
            watch.since = time.monotonic()

    def built(self, worker_id: int, restarts: int) -> None:
        """Records that the worker's actor after ``restarts`` restarts replied: from now its silence is a stall."""
        self._built[worker_id] = restarts

    def forget(self, worker_id: int) -> None:
        """Drops a worker's watch and probes (it was killed or retired)."""
        self._watches.pop(worker_id, None)
        self._built.pop(worker_id, None)
        refs = [ref for ref, (w, _) in self._probes.items() if w == worker_id]
        for ref in refs:
            del self._probes[ref]
        self.pool.forget(refs)

    def close(self) -> None:
        """Drops every probe in flight."""
        self.pool.forget(list(self._probes))
        self._probes.clear()
        self._watches.clear()

    def _probe(self, worker_id: int, restarts: int, now: float) -> None:
        if any(w == worker_id for w, _ in self._probes.values()):
            return  # one probe in flight per worker
        if now - self._probed_at.get(worker_id, -1e9) < self.interval_s:
            return
        self._probed_at[worker_id] = now
        self._probes[self.pool.submit(worker_id, "progress")] = (worker_id, restarts)

    def _read_probes(self, now: float) -> None:
        if not self._probes:
            return
        ready = self.pool.wait(list(self._probes), num_returns=len(self._probes), timeout_s=0)
        for ref in ready:
            worker_id, restarts = self._probes.pop(ref)
            try:
                steps = self.pool.outcome(ref)
            except WorkerError:
                continue  # the batch's own future reports the failure
            if steps is DIED:
                continue
            self.built(worker_id, restarts)
            watch = self._watches.get(worker_id)
            if watch is None or watch.restarts != restarts:
                continue
            if steps != watch.steps:
                watch.steps, watch.since = steps, now
