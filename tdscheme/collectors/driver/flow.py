"""BatchFlow: requests batches from the worker pool and yields them first-ready or stacked.

It owns the request bookkeeping of an iteration: how many requests each worker
keeps in flight (prefetch), never requesting frames past ``total_frames``,
re-requesting what a dead worker lost, cutting stragglers off (preemption),
dropping batches that are too stale, decoding, and counting everything in
:class:`~tdscheme.collectors.driver.stats.CollectorStats`. Each request is booked in
the frame ledger when sent and when resolved (the rule for each case:
:mod:`tdscheme.collectors.driver.ledger`); :meth:`BatchFlow.requests_in_flight` is the
flow's own record of what is in flight
(:class:`~tdscheme.collectors.driver.in_flight.RequestsInFlight`), to hold the ledger's against.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from tensordict import TensorDictBase

from tdscheme.collectors.config import RayCollectorConfig
from tdscheme.collectors.driver.in_flight import Request, RequestsInFlight
from tdscheme.collectors.driver.ledger import BatchRecord, TrajectoryIds, cut_to_fit
from tdscheme.collectors.driver.liveness import StallMonitor
from tdscheme.collectors.driver.pool import WorkerPool
from tdscheme.collectors.driver.stacking import stack_rollouts
from tdscheme.collectors.driver.stats import CollectorStats
from tdscheme.collectors.worker.buffer_writer import last_write
from tdscheme.collectors.worker.spec import WorkerBatch
from tdscheme.transport import TensorDictCodec

_POLL_S = 1.0

logger = logging.getLogger(__name__)


class BatchFlow:
    """Turns worker requests into a stream of batches.

    Args:
        pool: the workers.
        config: the collector's settings (order, prefetch, lag bound, preemption).
        stats: where frames and timings are counted.
        codec: decodes the workers' payloads.
        after_batch: called with a batch's worker ids when the consumer asks for
            the next batch (the collector's automatic weight pushes).
    """

    def __init__(
        self,
        pool: WorkerPool,
        config: RayCollectorConfig,
        stats: CollectorStats,
        codec: TensorDictCodec,
        after_batch: Callable[[list[int]], None],
    ) -> None:
        self.pool = pool
        self.config = config
        self.stats = stats
        self.codec = codec
        self.after_batch = after_batch
        #: worker id -> policy version of the last batch it delivered
        self.running_versions: dict[int, int] = {}
        #: the newest policy version pushed or seen in a batch (a torchrl learner that
        #: publishes the weights itself runs versions the driver never pushed)
        self.newest_version = 0
        #: set to stop requesting: the flow drains what is in flight and ends
        self.stopping = False
        self._next_batch_id = 0
        #: the number of the current iteration: a new one supersedes the one before it
        self.iteration = 0
        #: the requests sent and not resolved yet (each booked in ``stats.ledger``)
        self.requests = RequestsInFlight(stats.ledger)
        self._budget_closed = False
        self._traj_ids = TrajectoryIds()
        stall_s = config.worker_stall_timeout_s
        self._monitor = (
            None
            if stall_s is None
            else StallMonitor(pool, stall_s, start_timeout_s=config.actor_start_timeout_s)
        )

    def frames_done(self) -> bool:
        """Whether ``total_frames`` frames were yielded (or written)."""
        total = self.config.total_frames
        return total >= 0 and self.stats.frames >= total

    def frames_left(self) -> int | None:
        """Frames that may still be yielded (or written); ``None`` without a budget.

        0 once the budget is spent, also when the last batch was cut short of it
        (an env batch keeps whole steps; a replay write keeps whole rows).
        """
        total = self.config.total_frames
        if total < 0:
            return None
        return 0 if self._budget_closed else max(0, total - self.stats.frames)

    def budget_changed(self) -> None:
        """Reopens the budget after ``config.total_frames`` changed (``set_total_frames``)."""
        self._budget_closed = False

    def more_frames(self, in_flight: int) -> bool:
        """Whether frames beyond those yielded and ``in_flight`` are still wanted."""
        if self.stopping or self._budget_closed:
            return False
        total = self.config.total_frames
        return total < 0 or self.stats.frames + in_flight < total

    def request_stop(self) -> None:
        """Stops requesting: the running iteration drains what is in flight and ends."""
        self.stopping = True

    def _begin_iteration(self) -> int:
        """Starts an iteration; one still open before it ends, its requests discarded.

        Two iterations over the same workers cannot share them: the newest one
        wins, and the requests of the one it supersedes are booked as discarded
        (that iterator ends at its next step). Returns the new iteration's number.
        """
        self.requests.discard_all()
        self.iteration += 1
        return self.iteration

    def _current(self, iteration: int) -> bool:
        return iteration == self.iteration

    def _request(self, worker_id: int, batch_id: int) -> Any:
        """Asks a worker for its whole batch; with a replay buffer, never past ``total_frames``.

        A worker that writes into a replay buffer gets a frame budget: what
        ``total_frames`` leaves after the frames written and those promised to
        the requests in flight. The request is booked in the ledger.
        """
        whole = self.pool.batch_frames(worker_id)
        frames = self.config.frames_per_worker if whole is None else whole
        budget = None
        if self.config.replay_buffer is not None and self.config.total_frames >= 0:
            left = self.config.total_frames - self.stats.frames - self.requests.frames_bound()
            if self.config.trajs_per_batch is None:
                budget = max(0, min(frames, left))
            else:  # a batch of whole trajectories has no fixed size: share what is left
                budget = max(0, left // max(1, len(self.pool)))
        ref = self.pool.collect(worker_id, batch_id, budget)
        bound = frames if budget is None else budget
        asked = frames if whole is not None else min(frames, bound)
        generation = self.pool.generation(worker_id)
        self.requests.send(
            ref, Request(worker_id, batch_id, bound, asked, whole is not None, generation)
        )
        return ref

    def first_ready(self) -> Iterator[TensorDictBase | None]:
        """Yields each worker's batch as soon as it is ready (``sync=False``).

        With a replay buffer the workers write their frames into it and each
        batch is ``None`` (as in torchrl).
        """
        cfg, pool = self.config, self.pool
        prefetch = cfg.prefetch_batches
        owner: dict[Any, int] = {}

        def top_up(worker_id: int, target: int) -> None:
            start = time.perf_counter()
            while sum(1 for w in owner.values() if w == worker_id) < target and self.more_frames(
                self.requests.frames_bound()
            ):
                owner[self._request(worker_id, self._new_batch_id())] = worker_id
            self.stats.dispatch_s += time.perf_counter() - start

        iteration = self._begin_iteration()
        self.stats.start_clock()
        try:
            for worker_id in self.pool.active_ids():
                top_up(worker_id, max(1, prefetch))
            while owner and not self.frames_done():
                ref = self._wait_one(list(owner))
                worker_id = owner.pop(ref)
                result = self._receive(ref)
                if result is None:  # lost (rebuilt or retired): its frames go to whoever is free
                    for other in [worker_id, *pool.active_ids()]:
                        if other not in pool.retired:
                            top_up(other, max(1, prefetch))
                    continue
                batch = self._account([(ref, result)], self._decode(result))
                if batch is None and result.payload is not None:
                    continue  # cut to fit total_frames, nothing left
                top_up(worker_id, prefetch)
                yield batch
                if not self._current(iteration):
                    return  # superseded: its requests were discarded
                self.after_batch([worker_id])
                top_up(worker_id, max(1, prefetch))
                for other in self.pool.active_ids():
                    if other not in owner.values():  # a worker added while iterating
                        top_up(other, max(1, prefetch))
        finally:
            pool.forget(owner)
            if self._current(iteration):
                self.requests.discard_all()

    def stacked(self) -> Iterator[TensorDictBase | None]:
        """Yields one batch stacked from every worker's rollout (``sync=True``)."""
        cfg = self.config
        queue: deque[tuple[int, dict[int, Any]]] = deque()

        def top_up(target: int) -> None:
            start = time.perf_counter()
            while len(queue) < target and self.more_frames(self.requests.frames_bound()):
                batch_id = self._new_batch_id()
                refs = {}
                for w in self.pool.active_ids():
                    refs[w] = self._request(w, batch_id)
                queue.append((batch_id, refs))
            self.stats.dispatch_s += time.perf_counter() - start

        iteration = self._begin_iteration()
        self.stats.start_clock()
        try:
            top_up(max(1, cfg.prefetch_batches))
            while queue and not self.frames_done():
                batch_id, refs = queue.popleft()
                results = self._gather(batch_id, refs)
                parts = [self._decode(results[w][1]) for w in sorted(results)]
                stacked = None if parts[0] is None else self._stack(parts)
                batch = self._account([results[w] for w in sorted(results)], stacked)
                if batch is None and parts[0] is not None:
                    continue  # cut to fit total_frames, nothing left
                top_up(cfg.prefetch_batches)
                yield batch
                if not self._current(iteration):
                    return  # superseded: its requests were discarded
                self.after_batch(sorted(results))
                top_up(max(1, cfg.prefetch_batches))
        finally:
            for _, refs in queue:
                self.pool.forget(refs.values())
            if self._current(iteration):
                self.requests.discard_all()

    def _gather(self, batch_id: int, refs: dict[int, Any]) -> dict[int, tuple[Any, WorkerBatch]]:
        """Waits for one sync batch, cutting stragglers off and re-requesting lost parts.

        Returns:
            Each worker's ``(future, batch)``.
        """
        cfg, pool = self.config, self.pool
        results: dict[int, tuple[Any, WorkerBatch]] = {}
        pending = {ref: w for w, ref in refs.items()}
        cut = False
        while pending:
            ref = self._wait_one(list(pending))
            worker_id = pending.pop(ref)
            result = self._receive(ref)
            if result is None:
                if worker_id not in pool.retired:
                    pending[self._request(worker_id, batch_id)] = worker_id
                continue
            results[worker_id] = (ref, result)
            frames_in = sum(r.frames for _, r in results.values())
            if not cut and cfg.preemption.should_cut(
                finished=len(results), workers=len(refs), frames=frames_in,
                frames_per_batch=cfg.frames_per_worker * len(refs),
            ):  # fmt: skip
                cut = True
                for straggler in pending.values():
                    pool.preempt(straggler, batch_id)
        return results

    def _receive(self, ref: Any) -> WorkerBatch | None:
        """The batch behind ``ref``; ``None`` if it was lost (dead worker) or is too stale.

        A lost or stale request is resolved here; a batch returned is resolved by
        :meth:`_account`. A call that raises leaves the request in flight.
        """
        result = self.pool.result(ref)
        request = self.requests.receive(ref)
        if result is None:
            result = self._written_before_death(request.worker_id, request.batch_id)
        if result is None:
            self.stats.frames_lost += request.asked
            self.requests.resolve(ref, request, None, lost=request.asked)
            return None
        result.incarnation = request.incarnation
        if self._monitor is not None:  # a worker that replied is placed and built
            self._monitor.built(request.worker_id, request.incarnation)
        self.stats.frames_dropped += result.frames_dropped  # too stale when written
        if result.frames_discarded:  # the budget bound
            self.stats.frames_discarded += result.frames_discarded
            # Near the end (a budget under a batch), what is left fits no row or trajectory.
            full = request.asked if request.fixed else self.config.frames_per_worker
            self._budget_closed = self._budget_closed or request.frames < full
        lag = self.pool.version - result.policy_version
        max_lag = self.config.max_policy_lag
        # written into the replay buffer (no payload): the worker applied the lag bound
        if result.payload is not None and max_lag is not None and lag > max_lag:
            not_collected = self.requests.not_collected(request, result)
            self.stats.frames_dropped += result.frames
            self.stats.frames_preempted += not_collected
            self.requests.resolve(
                ref, request, result, dropped=result.frames + result.frames_dropped,
                discarded=result.frames_discarded, preempted=not_collected,
            )  # fmt: skip
            return None
        return result

    def _written_before_death(self, worker_id: int, batch_id: int) -> WorkerBatch | None:
        """The reply of a worker that died after writing its batch (see :mod:`.replay`)."""
        if self.config.replay_buffer is None:
            return None
        record = last_write(self.config.replay_buffer, worker_id)
        if record is None or record.batch_id != batch_id:
            return None
        self.stats.frames_written_by_dead_workers += record.frames
        return record

    def _wait_one(self, refs: list[Any]) -> Any:
        start = time.perf_counter()
        deadline = start + self.config.batch_timeout_s
        poll_s = _POLL_S if self._monitor is None else min(_POLL_S, self._monitor.interval_s)
        try:
            while True:
                self._kill_stalled()
                ready = self.pool.wait(refs, timeout_s=min(poll_s, deadline - time.perf_counter()))
                if ready:
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
                f"hung: no progress (env steps) for worker_stall_timeout_s="
                f"{self.config.worker_stall_timeout_s:g} s"
            )
            logger.warning("collector worker %d declared %s; killing it", worker_id, reason)
            self.stats.hung += 1
            self._monitor.forget(worker_id)
            self.pool.kill(worker_id, reason)

    def _decode(self, result: WorkerBatch) -> TensorDictBase | None:
        if result.payload is None:  # written into the replay buffer by the worker
            return None
        start = time.perf_counter()
        td = self.codec.decode(result.payload)
        self._traj_ids.shift_(td, result.worker_id, result.incarnation)
        self.stats.decode_s += time.perf_counter() - start
        return td

    def _stack(self, parts: list[TensorDictBase]) -> TensorDictBase:
        return stack_rollouts(parts, masked=self.config.preemption.enabled)

    def _account(
        self, parts: list[tuple[Any, WorkerBatch]], batch: TensorDictBase | None
    ) -> TensorDictBase | None:
        """Counts a batch (``parts``: its futures and replies, in order); cuts it to fit ``total_frames``.

        Returns:
            The batch, cut along time when it would pass ``total_frames`` (``None``
            when nothing of it fits).
        """
        stats = self.stats
        results = [r for _, r in parts]
        self.newest_version = max(
            [self.newest_version, self.pool.version, *(r.policy_version for r in results)]
        )
        kept = [r.frames for r in results]
        if batch is not None and self.config.total_frames >= 0:
            left = max(0, self.config.total_frames - stats.frames)
            batch, cut = cut_to_fit(batch, left, stacked=self.config.sync)
            if cut is not None:
                kept = cut
                self._budget_closed = True
                if sum(kept) == 0:
                    batch = None
        for (ref, r), frames in zip(parts, kept, strict=True):
            request = self.requests.get(ref)
            not_collected = self.requests.not_collected(request, r)
            stats.frames += frames
            stats.frames_per_worker[r.worker_id] += frames
            stats.frames_discarded += r.frames - frames
            stats.frames_preempted += not_collected
            self.requests.resolve(
                ref, request, r, yielded=frames, discarded=r.frames - frames + r.frames_discarded,
                dropped=r.frames_dropped, preempted=not_collected,
            )  # fmt: skip
            stats.ledger.record(
                BatchRecord(r.worker_id, r.incarnation, r.batch_id, r.policy_version, frames)
            )
            stats.lag_counts[self.newest_version - r.policy_version] += 1
            self.running_versions[r.worker_id] = r.policy_version
            stats.collect_s += r.collect_s
            stats.encode_s += r.encode_s
            stats.bytes_received += r.payload.nbytes if r.payload is not None else 0
        stats.batches += 1
        self.pool.poll_acks()
        return batch

    def _new_batch_id(self) -> int:
        self._next_batch_id += 1
        return self._next_batch_id
