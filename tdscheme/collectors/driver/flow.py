"""BatchFlow: requests batches from the worker pool and yields them first-ready or stacked.

It owns the order of an iteration: how many requests each worker keeps in flight
(prefetch), re-requesting what a dead worker lost, cutting stragglers off
(preemption), decoding, and counting each batch. The frame budget
(:mod:`~tdscheme.collectors.driver.budget`) says what may still be asked; the
replies (:mod:`~tdscheme.collectors.driver.replies`) waits for replies and
resolves deaths, stalls and stale batches. Each request is booked in
the frame ledger when sent and when resolved (the rule for each case:
:mod:`tdscheme.collectors.driver.ledger`); :meth:`BatchFlow.requests_in_flight` is the
flow's own record of what is in flight
(:class:`~tdscheme.collectors.driver.in_flight.RequestsInFlight`), to hold the ledger's against.
Stacked batches of preempted workers are padded (:func:`stack_rollouts`; the thresholds
are :class:`~tdscheme.stragglers.PreemptionConfig`'s).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from tensordict import TensorDictBase

from tdscheme.collectors.driver.budget import FrameBudget
from tdscheme.collectors.driver.in_flight import Request, RequestsInFlight
from tdscheme.collectors.driver.ledger import BatchRecord, TrajectoryIds
from tdscheme.collectors.driver.liveness import HUNG
from tdscheme.collectors.driver.pool import WorkerPool
from tdscheme.collectors.driver.replies import Replies
from tdscheme.collectors.driver.stats import CollectorStats
from tdscheme.collectors.settings.config import RayCollectorConfig
from tdscheme.collectors.settings.specs import WorkerBatch
from tdscheme.keys import MASK_KEY
from tdscheme.transport import TensorDictCodec
from tdscheme.transport.next_fold import folded_keys

#: The first rest of a worker that lost two requests in a row, without a stall timeout.
_REST_S = 10.0
#: The longest rest (it doubles with each further loss in a row).
_MAX_REST_S = 600.0


class BatchFlow:
    """Turns worker requests into a stream of batches.

    Args:
        pool: the workers.
        config: the collector's settings (order, prefetch, lag bound, preemption).
        stats: where frames and timings are counted.
        codec: decodes the workers' payloads.
        after_batch: called with a batch's worker ids when the consumer asks for
            the next batch, if more frames are wanted (the automatic weight pushes);
            ``None``: nothing is called.
    """

    def __init__(
        self,
        pool: WorkerPool,
        config: RayCollectorConfig,
        stats: CollectorStats,
        codec: TensorDictCodec,
        after_batch: Callable[[list[int]], None] | None,
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
        self.budget = FrameBudget(config, stats.ledger)
        self.replies = Replies(pool, config, self.requests, stats, self.budget)
        self._traj_ids = TrajectoryIds()
        #: worker id -> requests lost in a row (a death or a hang, no batch since)
        self._losses: dict[int, int] = {}
        #: worker id -> when a worker that lost requests in a row may be asked again
        self._cooling_until: dict[int, float] = {}

    def _lost(self, worker_id: int) -> None:
        """Counts a request lost to a hang; a second in a row rests the worker (doubling each time).

        A rebuilt worker whose env hangs again would otherwise take the frames the
        healthy workers could collect, and the run would wait one
        ``worker_stall_timeout_s`` per rebuild. While it rests, it gets requests only
        when no other worker can take them. A worker that crashes costs no such wait:
        it is rebuilt at once, and ``max_restarts`` decides when the run fails.
        """
        if not self.pool.restart_reasons.get(worker_id, "").startswith(HUNG):
            return
        losses = self._losses[worker_id] = self._losses.get(worker_id, 0) + 1
        if losses >= 2:
            base = self.config.worker_stall_timeout_s or _REST_S
            rest = min(base * 2 ** (losses - 2), _MAX_REST_S)
            self._cooling_until[worker_id] = time.monotonic() + rest

    def _resting(self, worker_id: int) -> bool:
        """Whether ``worker_id`` rests while another active worker could take its request."""
        until = self._cooling_until.get(worker_id)
        if until is None or time.monotonic() >= until:
            return False
        now = time.monotonic()
        return any(
            self._cooling_until.get(w, 0.0) <= now for w in self.pool.active_ids() if w != worker_id
        )

    def more_frames(self, in_flight: int) -> bool:
        """Whether frames beyond those yielded and ``in_flight`` are still wanted."""
        return not self.stopping and self.budget.wanted(in_flight)

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
        self.stopping = False
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
        budget = self.budget.for_request(
            frames, promised=self.requests.frames_bound(), workers=len(self.pool)
        )
        ref = self.pool.collect(worker_id, batch_id, budget)
        bound = frames if budget is None else budget
        asked = frames if whole is not None else min(frames, bound)
        restarts = self.pool.restart_count(worker_id)
        self.requests.send(
            ref, Request(worker_id, batch_id, bound, asked, whole is not None, restarts)
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
            if self._resting(worker_id):
                return
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
            while owner and not self.budget.done():
                ref = self.replies.wait_one(list(owner))
                worker_id = owner.pop(ref)
                result = self.replies.receive(ref)
                if result is None:  # lost (rebuilt or retired): its frames go to the others first,
                    self._lost(worker_id)  # with room for one more request each, then to it
                    for other in pool.active_ids():
                        if other != worker_id:
                            top_up(other, max(1, prefetch) + 1)
                    if worker_id not in pool.retired:
                        top_up(worker_id, max(1, prefetch))
                    continue
                self._losses.pop(worker_id, None)  # it delivered: no longer resting
                self._cooling_until.pop(worker_id, None)
                # the next requests before this batch is decoded and counted: the workers step
                # meanwhile (until it is counted, the budget holds its request as in flight)
                for other in pool.active_ids():  # what is left goes to an idle worker first:
                    if other != worker_id and other not in owner.values():  # (one that wrote
                        top_up(other, max(1, prefetch))  # nothing must not keep it for ever)
                top_up(worker_id, prefetch)
                batch = self._account([(ref, result)], self._decode(result))
                if batch is None and result.payload is not None:
                    continue  # cut to fit total_frames, nothing left
                yield batch
                if not self._current(iteration):
                    return  # superseded: its requests were discarded
                if self.more_frames(0):  # else no batch will be collected with new weights
                    if self.after_batch is not None:
                        self.after_batch([worker_id])
                top_up(worker_id, max(1, prefetch))
                for other in self.pool.active_ids():
                    if other not in owner.values():  # a worker added while iterating
                        top_up(other, max(1, prefetch))
            self.budget.check_end(stopped=self.stopping or not self._current(iteration))
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
            while queue and not self.budget.done():
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
                if self.more_frames(0):
                    if self.after_batch is not None:
                        self.after_batch(sorted(results))
                top_up(max(1, cfg.prefetch_batches))
            self.budget.check_end(stopped=self.stopping or not self._current(iteration))
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
            ref = self.replies.wait_one(list(pending))
            worker_id = pending.pop(ref)
            result = self.replies.receive(ref)
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

    def _decode(self, result: WorkerBatch) -> TensorDictBase | None:
        if result.payload is None:  # written into the replay buffer by the worker
            return None
        start = time.perf_counter()
        td = self.codec.decode(result.payload)
        self.stats.dedup_keys.update(folded_keys(result.payload))
        self._traj_ids.shift_(td, result.worker_id, result.restarts)
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
        if batch is not None:
            batch, cut = self.budget.cut(batch, stacked=self.config.sync)
            kept = kept if cut is None else cut
        for (ref, r), frames in zip(parts, kept, strict=True):
            request = self.requests.get(ref)
            not_collected = self.requests.not_collected(request, r)
            stats.frames_per_worker[r.worker_id] += frames
            self.requests.resolve(
                ref, request, r, yielded=frames, discarded=r.frames - frames + r.frames_discarded,
                dropped=r.frames_dropped, preempted=not_collected, reset_steps=r.reset_steps,
                held_back=r.frames_held_back,
            )  # fmt: skip
            stats.ledger.record(
                BatchRecord(r.worker_id, r.restarts, r.batch_id, r.policy_version, frames)
            )
            stats.lag_counts[self.newest_version - r.policy_version] += 1
            self.running_versions[r.worker_id] = r.policy_version
            stats.collect_s += r.collect_s
            stats.encode_s += r.encode_s
            stats.bytes_received += r.payload.nbytes if r.payload is not None else 0
            if r.episodes is not None:  # written into the replay buffer
                stats.add_written_episodes(r.episodes)
        stats.batches += 1
        self.pool.poll_acks()
        return batch

    def _new_batch_id(self) -> int:
        self._next_batch_id += 1
        return self._next_batch_id


def pad_time(td: TensorDictBase, length: int) -> TensorDictBase:
    """Pads ``td`` along its last (time) dim to ``length`` and marks valid frames.

    The validity mask goes to ``("collector", "mask")`` (a mask ``td`` already holds,
    as torchrl's padded trajectories do, is kept); padded frames are zeros.

    Example:
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"x": torch.ones(3)}, batch_size=[3])
        >>> out = pad_time(td, 5)
        >>> out["x"].tolist(), out["collector", "mask"].tolist()
        ([1.0, 1.0, 1.0, 0.0, 0.0], [True, True, True, False, False])
    """
    steps = td.batch_size[-1]
    if steps > length:
        raise ValueError(f"pad_time: the rollout has {steps} steps, more than length={length}")
    td = td.clone(False)
    if MASK_KEY not in td.keys(include_nested=True):
        td.set(MASK_KEY, torch.ones(td.batch_size, dtype=torch.bool))
    if steps == length:
        return td
    filler = td[..., -1:].expand(*td.batch_size[:-1], length - steps).clone().zero_()
    return torch.cat([td, filler], dim=-1)


def stack_rollouts(tds: Sequence[TensorDictBase], *, masked: bool) -> TensorDictBase:
    """Stacks one rollout per worker into a ``[num_workers, ...]`` batch.

    Args:
        tds: the workers' rollouts, time last.
        masked: pad shorter (preempted) rollouts to the longest one and add
            ``("collector", "mask")``; with ``False`` all must have the same shape
            but whole trajectories (``trajs_per_batch``: each worker's batch is padded
            to its longest trajectory, with a mask), which are padded to the longest.
    """
    if masked or any(MASK_KEY in td.keys(include_nested=True) for td in tds):
        length = max(td.batch_size[-1] for td in tds)
        tds = [pad_time(td, length) for td in tds]
    return torch.stack(list(tds), dim=0)
