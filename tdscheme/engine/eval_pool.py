"""EvalPool: evaluation beside training, on eval worker actors (the driver's side).

The Trainer hands the pool the newest policy weights when an evaluation is due
(:meth:`EvalPool.start_evaluation`) and goes on training; :meth:`EvalPool.poll` returns the evaluations that finished since,
each with the frame count of the weights it used (AllenAct's validation beside
training, RLlib's ``evaluation_parallel_to_training``). Each worker runs one
evaluation at a time; when every worker is busy a due evaluation waits for the first
that frees, and a newer one replaces it meanwhile (the replaced one is counted as
``skipped``), so training never waits and requests never pile up. Videos, when the spec
asks for them, come with the replies (each reply brings those finished since the
worker's last) and, at the end of a run, from :meth:`EvalPool.drain_videos`. A worker
that dies is rebuilt (:class:`~tdscheme.runtime.actor_pool.ActorPool`'s rules,
``max_restarts``) and its evaluation sent again; one that runs past ``timeout_s`` is
declared hung, killed and rebuilt the same way.

The actor's side is :mod:`tdscheme.engine.eval_worker`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

import ray
from tensordict import TensorDictBase

from tdscheme.engine.eval_worker import EvalReply, EvalWorker, EvalWorkerSpec
from tdscheme.errors import EvalWorkerError
from tdscheme.runtime.actor_pool import DIED, ActorPool

__all__ = ["EvalPool"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class _Request:
    weights: Any  # an object ref, put once
    frames: int
    seed: int | None
    sent_at: float
    key: Any = None  # the caller's name for it, given back in its reply
    video: bool = False


class EvalPool(ActorPool):
    """Eval worker actors, one evaluation in flight each (see the module).

    Args:
        spec: what every eval worker is built from.
        num_workers: eval workers (``>= 1``).
        remote_options: Ray actor options of each, e.g. ``{"num_cpus": 1}``.
        max_restarts: rebuilds allowed per worker before an :class:`EvalWorkerError`.
        timeout_s: an evaluation running longer than this is a hung worker.
        start_timeout_s: the longest wait for the workers to be placed and built.

    Raises:
        EvalWorkerError: a worker's constructor raised (a bad env factory); at the first
            evaluation, as the workers are built in the background.
        tdscheme.errors.PlacementError: the workers could not be placed (at
            once when the cluster could never hold them, else at the first evaluation).
    """

    error_class = EvalWorkerError

    def __init__(
        self,
        spec: EvalWorkerSpec,
        num_workers: int,
        *,
        remote_options: dict[str, Any],
        max_restarts: int = 3,
        timeout_s: float = 600.0,
        start_timeout_s: float = 120.0,
    ) -> None:
        super().__init__(EvalWorker, max_restarts=max_restarts)
        self.timeout_s = timeout_s
        for _ in range(num_workers):
            self.add_slot(spec, remote_options)
        self.check_fits([remote_options] * num_workers, argument="eval_workers")
        for worker_id in range(num_workers):
            self.start(worker_id)
        # built in the background (an actor process imports torch: seconds): waited for at
        # the first evaluation, so the workers start while training does
        self._start_timeout_s: float | None = start_timeout_s
        self._pending: dict[Any, tuple[int, _Request]] = {}  # ref -> (worker, request)
        self._queued: _Request | None = None  # the newest evaluation waiting for a worker
        self.skipped = 0

    @property
    def busy(self) -> int:
        """Evaluations in flight or waiting for a worker."""
        return len(self._pending) + (self._queued is not None)

    def _idle(self) -> list[int]:
        return sorted(set(self.active_ids()) - {w for w, _ in self._pending.values()})

    def start_evaluation(
        self,
        weights: TensorDictBase,
        *,
        frames: int,
        seed: int | None,
        key: Any = None,
        video: bool = False,
    ) -> bool:
        """Starts an evaluation of ``weights`` on an idle worker, else queues it.

        One evaluation waits at most: when every worker is busy it goes to the first
        that frees (:meth:`poll`), and newer weights replace it meanwhile (the replaced
        one counts as ``skipped``). Returns whether it started now.

        Args:
            weights: the policy weights (CPU), put in the object store once.
            frames: the frames they were trained on: the step the result is logged at.
            seed: the evaluation env's seed.
            key: the caller's name for this evaluation, given back as its reply's
                ``key`` (e.g. the checkpoint it came from; frames need not be unique).
            video: the worker also records a video after it (the spec's ``video``).
        """
        if self._start_timeout_s is not None:
            self.wait_started(
                range(len(self)), timeout_s=self._start_timeout_s, argument="eval_workers"
            )
            self._start_timeout_s = None
        request = _Request(ray.put(weights), frames, seed, time.monotonic(), key, video)
        idle = self._idle()
        if idle:
            self._send(idle[0], request)
            return True
        if self._queued is not None:  # the newer weights replace those that waited
            self.skipped += 1
            logger.info(
                "evaluation at %d frames skipped: newer weights replace it while every eval "
                "worker is busy", self._queued.frames,
            )  # fmt: skip
        self._queued = request
        return False

    def poll(self, timeout_s: float = 0.0) -> list[EvalReply]:
        """The evaluations that finished within ``timeout_s``, oldest weights first.

        A dead worker is rebuilt and its evaluation sent again; one whose evaluation
        ran past ``timeout_s`` (the pool's) is killed, rebuilt and sent it again.

        Raises:
            EvalWorkerError: an evaluation raised in a worker, or a worker died (or
                hung) more than ``max_restarts`` times.
        """
        replies = []
        for ref in self.wait(
            list(self._pending), num_returns=len(self._pending), timeout_s=timeout_s
        ):
            worker_id, request = self._pending.pop(ref)
            reply = self.outcome(ref)
            if reply is DIED:
                self._resend(worker_id, request, self.last_death.get(worker_id, "died"))
            else:
                replies.append(dataclasses.replace(reply, key=request.key))
        idle = self._idle()
        if self._queued is not None and idle:
            self._send(idle[0], self._queued)
            self._queued = None
        now = time.monotonic()
        for ref, (worker_id, request) in list(self._pending.items()):
            if now - request.sent_at > self.timeout_s:
                self._pending.pop(ref)
                self.forget([ref])
                reason = f"hung: no evaluation result in {self.timeout_s:g} s"
                self.kill(worker_id, reason)
                self._resend(worker_id, request, reason)
        return sorted(replies, key=lambda reply: reply.frames)

    def drain(self, timeout_s: float) -> list[EvalReply]:
        """Waits for every evaluation in flight (at most ``timeout_s``); returns them.

        Raises:
            TimeoutError: some did not finish in time.
        """
        deadline = time.monotonic() + timeout_s
        replies: list[EvalReply] = []
        while self.busy and time.monotonic() < deadline:
            replies += self.poll(timeout_s=min(1.0, max(0.0, deadline - time.monotonic())))
        if self.busy:
            raise TimeoutError(f"{self.busy} evaluation(s) still running after {timeout_s:g} s")
        return sorted(replies, key=lambda reply: reply.frames)

    def drain_videos(self, timeout_s: float) -> list[tuple[int, Any]]:
        """The videos the workers recorded and have not replied yet: ``(frames, clip)``, oldest first.

        Each worker waits at most ``timeout_s`` for the one it is recording (see
        :meth:`~tdscheme.engine.eval_worker.EvalWorker.videos_done`).

        Raises:
            EvalWorkerError: a worker died or did not answer in time (its videos are lost).
        """
        answers = self.call_all("videos_done", [(timeout_s,)] * len(self), timeout_s + 30.0)
        done = [video for answer in answers if answer for video in answer]
        return sorted(done, key=lambda video: video[0])

    def _send(self, worker_id: int, request: _Request) -> None:
        request.sent_at = time.monotonic()
        ref = self.submit(
            worker_id, "evaluate", request.weights, request.frames, request.seed, request.video
        )
        self._pending[ref] = (worker_id, request)

    def _resend(self, worker_id: int, request: _Request, reason: str) -> None:
        self.restart(worker_id, reason)  # raises past max_restarts
        self._send(worker_id, request)
