"""Replies: waits for the workers' replies and resolves deaths, stalls and stale batches.

A reply is one of: a batch (resolved by the flow when it yields it), a batch too
stale for ``max_policy_lag`` (dropped and resolved here), or a death (the worker
crashed, or was declared hung and killed here): its request is resolved here as
``lost``, unless the worker's replay write landed before it died, whose record
resolves it as the reply would have. Every wait is bounded: by
``batch_timeout_s`` for a batch, and by the stall monitor
(:mod:`~tdscheme.collectors.driver.liveness`) for a worker that stopped stepping.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from tdscheme.collectors.driver.budget import FrameBudget
from tdscheme.collectors.driver.in_flight import RequestsInFlight
from tdscheme.collectors.driver.liveness import HUNG, StallMonitor
from tdscheme.collectors.driver.pool import WorkerPool
from tdscheme.collectors.driver.stats import CollectorStats
from tdscheme.collectors.settings.specs import WorkerBatch
from tdscheme.replay.ray_held import last_write

__all__ = ["Replies"]

_POLL_S = 1.0

logger = logging.getLogger(__name__)


class Replies:
    """The flow's side that waits: replies, deaths, stalls (see the module docstring).

    Args:
        pool: the workers.
        config: the collector's settings (timeouts, lag bound, replay buffer).
        requests: the flow's requests in flight, each booked in the ledger.
        stats: where waiting time and hung workers are counted.
        budget: closed when a reply's budget left no room for a whole row.
    """

    def __init__(
        self,
        pool: WorkerPool,
        config: Any,
        requests: RequestsInFlight,
        stats: CollectorStats,
        budget: FrameBudget,
    ) -> None:
        self.pool = pool
        self.config = config
        self.requests = requests
        self.stats = stats
        self.budget = budget
        stall_s = config.worker_stall_timeout_s
        self._monitor = (
            None
            if stall_s is None
            else StallMonitor(pool, stall_s, start_timeout_s=config.actor_start_timeout_s)
        )

    def receive(self, ref: Any) -> WorkerBatch | None:
        """The batch behind ``ref``; ``None`` if it was lost (dead worker) or is too stale.

        A lost or stale request is resolved here; a batch returned is resolved by
        the flow when it counts it. A call that raises leaves the request in flight.
        """
        result = self.pool.result(ref)
        request = self.requests.receive(ref)
        if result is None:
            result = self._written_before_death(request.worker_id, request.batch_id)
        if result is None:
            self.requests.resolve(ref, request, None, lost=request.asked)
            return None
        result.restarts = request.restarts
        if self._monitor is not None:  # a worker that replied is built, and progressed
            self._monitor.delivered(request.worker_id, request.restarts)
        if result.frames_discarded:  # the budget bound
            # Near the end (a budget under a batch), what is left fits no row or trajectory.
            full = request.asked if request.fixed else self.config.frames_per_worker
            # what fit in the budget: written, or left out for NaN / inf (drop_nonfinite_frames)
            self.budget.reply_short(
                request.frames, full, written=result.frames + result.frames_dropped
            )
        lag = self.pool.version - result.policy_version
        max_lag = self.config.max_policy_lag
        # written into the replay buffer (no payload): the worker applied the lag bound
        if result.payload is not None and max_lag is not None and lag > max_lag:
            not_collected = self.requests.not_collected(request, result)
            self.requests.resolve(
                ref, request, result, dropped=result.frames + result.frames_dropped,
                discarded=result.frames_discarded, preempted=not_collected,
                reset_steps=result.reset_steps, held_back=result.frames_held_back,
            )  # fmt: skip
            return None
        return result

    def _written_before_death(self, worker_id: int, batch_id: int) -> WorkerBatch | None:
        """The reply of a worker that died after writing its batch (see :mod:`tdscheme.replay.ray_held`)."""
        if self.config.replay_buffer is None:
            return None
        record = last_write(self.config.replay_buffer, worker_id)
        if record is None or record.batch_id != batch_id:
            return None
        self.stats.frames_written_by_dead_workers += record.frames
        return record

    def wait_one(self, refs: list[Any]) -> Any:
        """The oldest ready one of ``refs`` (they come oldest first); hung workers are killed meanwhile.

        ``ray.wait`` returns any of the ready futures, not the first in the list: when
        the consumer is slower than the workers, several are ready at each call, and a
        batch could wait behind dozens of newer ones (seen as policy lags of 20-60
        pushes in a Pong run). Of those ready, the one asked first is returned.

        Raises:
            TimeoutError: none was ready within ``batch_timeout_s`` though the
                workers answer pings.
        """
        start = time.perf_counter()
        deadline = start + self.config.batch_timeout_s
        poll_s = _POLL_S if self._monitor is None else min(_POLL_S, self._monitor.interval_s)
        try:
            while True:
                self._kill_stalled()
                ready = self.pool.wait(refs, timeout_s=min(poll_s, deadline - time.perf_counter()))
                if ready:
                    # the ready ones among those asked before it, then the oldest of them (no
                    # second wait when it is the oldest: one Ray call less per batch)
                    older = refs[: refs.index(ready[0])]
                    if older:
                        ready = self.pool.wait(older, num_returns=len(older), timeout_s=0) or ready
                        position = {ref: i for i, ref in enumerate(refs)}
                        return min(ready, key=position.__getitem__)
                    return ready[0]
                if time.perf_counter() >= deadline:
                    self.pool.check_alive()
                    waiting = sorted({self.pool.owner(r) for r in refs})
                    raise TimeoutError(
                        f"no batch from workers {waiting} in batch_timeout_s="
                        f"{self.config.batch_timeout_s} s, though they answer pings"
                    )
        finally:
            self.stats.wait_s += time.perf_counter() - start

    def _kill_stalled(self) -> None:
        """Kills the busy workers without progress for ``worker_stall_timeout_s``.

        Their futures then report a death: the batch is counted as lost and the
        worker rebuilt (or retired), as for a crash.
        """
        if self._monitor is None:
            return
        busy = {request.worker_id for request in self.requests.waiting()}
        for worker_id in self._monitor.check(busy):
            reason = (
                f"{HUNG}: no progress (env steps) for worker_stall_timeout_s="
                f"{self.config.worker_stall_timeout_s:g} s"
            )
            logger.warning("collector worker %d declared %s; killing it", worker_id, reason)
            self.stats.hung += 1
            self._monitor.forget(worker_id)
            self.pool.kill(worker_id, reason)
