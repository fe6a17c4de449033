"""Distributed prioritized replay (Ape-X's): K prioritized torchrl buffers in K actors, sampled as one.

Horgan et al. (2018) keep replay in a sharded, prioritized buffer that many actors write
into with priorities they compute themselves, and a learner samples across. Here each
shard is torchrl's ``RayReplayBuffer`` holding a ``TensorDictReplayBuffer`` with a
prioritized sampler (:func:`~tdscheme.replay.prioritized.prioritized_sampler`), and
:class:`ShardedReplayBuffer` is the driver's view of all of them:

* **Writes**: collector workers write into shard ``worker_id % K`` through its client
  (``RayCollector(replay_buffer=sharded)``: ``clients(n)`` hands them out in worker
  order), through tdscheme's codec like any Ray-held buffer. A write that carries the
  buffer's ``priority_key`` (the worker's own TD errors, see
  :mod:`tdscheme.collectors.worker.priorities`) gets those priorities; one without it
  gets the shard's max priority (torchrl's rule).
* **Samples**: each minibatch is split over the shards in proportion to their total
  priority (a multinomial draw), each shard samples its part by priority, and the
  importance weights are computed over the whole buffer, ``(N P(i)) ** -beta`` over
  their maximum, with ``P(i) = p_i ** alpha / sum over every shard`` and ``N`` the frames
  held in all shards: the same distribution and weights as one buffer of all the frames.
* **Priorities back**: :meth:`ShardedReplayBuffer.update_tensordict_priority` sends each
  shard its frames' new priorities without waiting (the next call collects the answers);
  a frame whose slot was written again since it was sampled keeps the new frame's
  priority: its update is dropped in the shard and counted (:meth:`stats`).
* **Failure**: a shard whose actor dies is restarted empty by Ray (``max_restarts``; the
  calls in flight are retried on it, a worker's write included, so no write is lost with
  the actor): its frames are lost, counted (``stats()["frames_lost"]``: those it held at the
  driver's last look, which a training loop takes every minibatch) and named in one
  warning; collection and learning go on. Past ``max_restarts`` a call is a
  :class:`~tdscheme.errors.ReplayBufferDied` naming the shard. Every call waits ``timeout_s``
  at most.

Example (with Ray; see ``tests/replay/test_sharded.py``)::

    buffer = ShardedReplayBuffer(num_shards=2, frames_per_shard=100_000, batch_size=256)
    collector = RayCollector(make_env, policy, frames_per_batch=1024, total_frames=-1,
                             num_collectors=4, replay_buffer=buffer)
    collector.start()
    sample = buffer.sample()            # priority_weight, shard, index
    sample["td_error"] = loss_td_error  # as torchrl's losses write it
    buffer.update_tensordict_priority(sample)
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import ray
import torch
from ray.exceptions import GetTimeoutError, RayActorError
from tensordict import TensorDictBase
from torchrl.data import LazyTensorStorage

from tdscheme.errors import ReplayBufferDied
from tdscheme.replay.prioritized import prioritized_sampler
from tdscheme.replay.ray_held import ray_buffer_kwargs
from tdscheme.replay.shard import (
    FrameReplayBuffer,
    priority_stats,
    sample_with_leaves,
    update_fresh,
)
from tdscheme.runtime.closing import ShutdownOnExit
from tdscheme.validation import check_int, invalid

__all__ = ["SHARD_KEY", "ShardedReplayBuffer"]

logger = logging.getLogger(__name__)

#: the key of each sampled frame's shard (beside torchrl's ``index`` within the shard)
SHARD_KEY = "shard"
#: the key of the shard's write count when a frame was sampled (stale updates are dropped)
WRITTEN_AT_KEY = "_shard_write_count"
#: priority updates a shard may have in flight before the driver waits for the oldest
MAX_UPDATES_IN_FLIGHT = 8


class ShardedReplayBuffer(ShutdownOnExit):
    """``num_shards`` prioritized Ray-held torchrl buffers that workers write into and a learner samples as one.

    Args:
        num_shards: the buffer actors (K).
        frames_per_shard: frames each holds (a ``LazyTensorStorage``).
        batch_size: frames per :meth:`sample` (when not given).
        alpha, beta, eps: prioritized replay's exponents and floor.
        priority_key: the key of the priorities in writes and in updates (the loss's).
        timeout_s: the longest any call on a shard may take.
        seed: seeds the split of each minibatch over the shards.
        num_cpus: CPUs each shard's actor takes from Ray (0: it only stores).
        priority_fn: ``fn(frames, policy)``, the priorities collector workers compute
            for the frames they write (e.g. :class:`~tdscheme.replay.priorities.QLearningPriority`;
            a ``RayCollector`` writing into this buffer takes it unless given its own
            ``replay_priority_fn``); ``None``: new frames come in at the max priority.
        n_step: the n-step returns the workers write (:class:`~tdscheme.replay.n_step.NStep`;
            a ``RayCollector`` takes it unless given its own ``replay_n_step``); ``None``:
            one-step frames.
        draws_per_call: minibatches of ``batch_size`` drawn in one round trip to the
            shards (handed out one per :meth:`sample`): a Ray call costs more than a
            small DQN step; their priorities then reach the shards up to that many
            steps after they were drawn (Ape-X's learner samples ahead alike). 1: one
            round trip a minibatch.
        max_restarts: times Ray restarts a dead shard's actor (empty); 0: a dead shard
            ends the run (``ReplayBufferDied``).

    Raises:
        ValueError: a bad count or exponent (named).
    """

    #: torchrl's mark of a buffer whose workers write through clients (``is_ray_replay_buffer``)
    service_backend = "ray"

    def __init__(
        self,
        *,
        num_shards: int,
        frames_per_shard: int,
        batch_size: int,
        alpha: float = 0.6,
        beta: float = 0.4,
        eps: float = 1e-8,
        priority_key: str = "td_error",
        timeout_s: float = 120.0,
        seed: int | None = None,
        num_cpus: float = 0,
        priority_fn: Any = None,
        n_step: Any = None,
        draws_per_call: int = 8,
        max_restarts: int = 3,
    ) -> None:
        check_int("num_shards", num_shards, minimum=1)
        check_int("frames_per_shard", frames_per_shard, minimum=1)
        check_int("batch_size", batch_size, minimum=1)
        for name, value in (("alpha", alpha), ("beta", beta)):
            if not value >= 0:
                raise invalid(name, value, "a number >= 0")
        from torchrl.data.replay_buffers.ray_buffer import RayReplayBuffer

        check_int("draws_per_call", draws_per_call, minimum=1)
        check_int("max_restarts", max_restarts, minimum=0)
        self.batch_size = batch_size
        self.priority_fn = priority_fn
        self.n_step = n_step
        self.draws_per_call = draws_per_call
        self._drawn: list[TensorDictBase] = []  # minibatches drawn ahead, handed out by sample()
        self._pending: list[TensorDictBase] = []  # priority updates not sent yet
        self.beta = beta
        self.priority_key = priority_key
        self.timeout_s = timeout_s
        self._rng = np.random.default_rng(seed)
        self._clients_handed = 0
        self._driver_writes = 0
        self._sums: np.ndarray | None = None  # each shard's total priority, as last seen
        self._updates: list[tuple[int, Any]] = []  # (shard, ObjectRef) in flight
        self._dropped = 0
        self._updated = 0
        self._seen = [(0, 0)] * num_shards  # (frames written, frames held) at the last look
        self._lost = 0
        self._restarts = 0
        kwargs = ray_buffer_kwargs(FrameReplayBuffer, num_cpus=num_cpus)
        # Ray restarts a dead shard (its constructor again: empty) and retries the calls in flight
        kwargs["remote_config"].update(
            max_restarts=max_restarts, max_task_retries=1 if max_restarts else 0
        )
        self.shards: list[Any] = []
        try:
            for _ in range(num_shards):
                self.shards.append(
                    RayReplayBuffer(
                        storage=functools.partial(LazyTensorStorage, frames_per_shard),
                        sampler=functools.partial(prioritized_sampler, frames_per_shard, alpha, beta, eps),
                        priority_key=priority_key,  # no batch_size: each sample says its own
                        **kwargs,
                    )
                )  # fmt: skip
        except BaseException:
            self.shutdown()
            raise

    # -- what RayCollector asks of a Ray-held buffer ----------------------------------------

    def client(self) -> Any:
        """The next shard's client (a writer's: shards are handed out round-robin)."""
        return self.clients(1)[0]

    def clients(self, num_clients: int) -> list[Any]:
        """Clients for ``num_clients`` writers, in worker order: writer ``w`` writes into shard ``w % K``."""
        first = self._clients_handed
        self._clients_handed += num_clients
        return [self.shards[(first + i) % len(self.shards)].client() for i in range(num_clients)]

    def shard_for_worker(self, worker_id: int) -> Any:
        """The shard (torchrl's ``RayReplayBuffer``) worker ``worker_id`` writes into."""
        return self.shards[worker_id % len(self.shards)]

    # -- the learner's calls -----------------------------------------------------------------

    #: what the training loop and the learner read: it samples by priority
    prioritized = True

    def extend(self, data: TensorDictBase) -> None:
        """Writes ``data`` (the driver's own frames) into the next shard, round-robin; its
        ``priority_key``, when present, gives their priorities."""
        k = self._driver_writes % len(self.shards)
        self._driver_writes += 1
        self._get([self._actor(k).extend.remote(data)], [k], "extend")

    def sample(self, batch_size: int | None = None) -> TensorDictBase:
        """``batch_size`` frames by priority over every shard, with importance weights over the whole buffer.

        Returns:
            The frames with ``priority_weight``, ``index`` (within the shard) and ``shard``.

        Raises:
            RuntimeError: every shard is empty.
            ReplayBufferDied: a shard's actor is dead (named).
            TimeoutError: a shard did not answer within ``timeout_s``.
        """
        count = self.batch_size if batch_size is None else batch_size
        if count == self.batch_size and self._drawn:
            return self._drawn.pop()
        block = self.draws_per_call if count == self.batch_size else 1
        frames = self._draw(count * block)
        if block == 1:
            return frames
        # a random split of i.i.d. draws: each minibatch is i.i.d. draws too
        order = torch.from_numpy(self._rng.permutation(count * block))
        self._drawn = list(frames[order].split(count))
        return self._drawn.pop()

    def _draw(self, count: int) -> TensorDictBase:
        """``count`` frames by priority over every shard, in one round trip to each."""
        self._send_updates()  # the last block's priorities go first (each shard runs calls in order)
        every = list(range(len(self.shards)))
        if self._sums is None or not self._sums.sum() > 0:  # the first minibatch: ask first
            self._sums = np.array([s[0] for s in self._on_every_shard(priority_stats, "sample")])
            if not self._sums.sum() > 0:
                raise RuntimeError("Cannot sample from an empty storage: no shard holds a frame")
        # the split follows each shard's total priority as of the last minibatch (one round
        # trip a minibatch); the weights use the probabilities each frame was drawn with
        share = self._sums / self._sums.sum()
        per_shard = self._rng.multinomial(count, share)
        answers = self._get(
            [self._actor(k).__ray_call__.remote(sample_with_leaves, int(per_shard[k])) for k in every],
            every, "sample",
        )  # fmt: skip
        stats = self._observe([stats for _, _, stats in answers])
        self._sums = np.array([s[0] for s in stats])
        held = sum(s[2] for s in stats)
        # P(i) = share of i's shard * p_i / that shard's sum; the largest weight is the least likely frame's
        if all(part is None for part, _, _ in answers):  # found empty (restarted since the last look)
            return self._draw(count)
        least = min(
            share[k] * s[1] / s[0] for k, s in enumerate(stats) if s[2] > 0 and share[k] > 0
        )
        frames = []
        for k, (part, leaves, (total, _, _, written)) in enumerate(answers):
            if part is None:
                continue
            probability = torch.as_tensor(share[k] * leaves / total)
            weight = (held * probability) ** -self.beta / (held * least) ** -self.beta
            part.set("priority_weight", weight.to(torch.float32))
            part.set(SHARD_KEY, torch.full(part.batch_size, k, dtype=torch.long))
            part.set(WRITTEN_AT_KEY, torch.full(part.batch_size, written, dtype=torch.long))
            frames.append(part)
        drawn = sum(part.numel() for part in frames)
        if drawn < count:  # a shard found empty (restarted since the last look): draw the rest again
            frames.append(self._draw(count - drawn))
        return torch.cat(frames)

    def update_tensordict_priority(self, sample: TensorDictBase) -> None:
        """Sends each shard the new priorities (``priority_key``) of its frames in ``sample``; does not wait.

        The updates of ``draws_per_call`` minibatches go in one call to each shard (and
        any still held go before the next draw, a checkpoint or :meth:`stats`).

        Raises (for an earlier update, collected here):
            ReplayBufferDied: a shard's actor is dead (named).
            TimeoutError: more than ``MAX_UPDATES_IN_FLIGHT`` updates waited past ``timeout_s``.
        """
        self._pending.append(
            sample.select(self.priority_key, SHARD_KEY, "index", WRITTEN_AT_KEY).reshape(-1)
        )
        if len(self._pending) >= self.draws_per_call:
            self._send_updates()

    def _send_updates(self) -> None:
        if not self._pending:
            return
        held, self._pending = torch.cat(self._pending), []
        priority = held.get(self.priority_key).detach().float().cpu()
        shard, index, written_at = held.get(SHARD_KEY), held.get("index"), held.get(WRITTEN_AT_KEY)
        for k in shard.unique().tolist():
            mine = shard == k
            ref = self._actor(k).__ray_call__.remote(
                update_fresh, index[mine], priority[mine], written_at[mine]
            )
            self._updates.append((k, ref))
        self._collect_updates(
            wait_for=len(self._updates) - MAX_UPDATES_IN_FLIGHT * len(self.shards)
        )

    def flush(self) -> None:
        """Sends the priority updates held and waits for every one (before a checkpoint, or to read :meth:`stats`)."""
        self._send_updates()
        self._collect_updates(wait_for=len(self._updates))

    # -- counts, checkpoints, shutdown ----------------------------------------------------------

    def __len__(self) -> int:
        return sum(s[2] for s in self._on_every_shard(priority_stats, "len"))

    @property
    def write_count(self) -> int:
        """Frames written into every shard."""
        return sum(self.write_counts())

    def write_counts(self) -> list[int]:
        """Frames written into each shard (the ledger's writes, shard by shard)."""
        return [s[3] for s in self._on_every_shard(priority_stats, "write counts")]

    def stats(self) -> dict[str, Any]:
        """``writes_per_shard``, ``frames_held``, ``priority_updates``, ``stale_updates_dropped``,
        ``shard_restarts`` and ``frames_lost`` (after a flush)."""
        self.flush()
        stats = self._on_every_shard(priority_stats, "stats")
        return {
            "writes_per_shard": [s[3] for s in stats],
            "frames_held": sum(s[2] for s in stats),
            "priority_updates": self._updated,
            "stale_updates_dropped": self._dropped,
            "shard_restarts": self._restarts,
            "frames_lost": self._lost,
        }

    def dumps(self, path: str | os.PathLike[str]) -> None:
        """Every shard's torchrl ``dumps`` (storage, sampler with its priorities, writer) under ``path/shard_K``."""
        self.flush()
        for k in range(len(self.shards)):
            self._get([self._actor(k).dumps.remote(str(Path(path) / f"shard_{k}"))], [k], "dumps")

    def loads(self, path: str | os.PathLike[str]) -> None:
        """What :meth:`dumps` wrote, shard by shard."""
        for k in range(len(self.shards)):
            self._get([self._actor(k).loads.remote(str(Path(path) / f"shard_{k}"))], [k], "loads")

    def shutdown(self) -> None:
        """Kills every shard's actor (idempotent)."""
        shards, self.shards = self.shards, []
        for shard in shards:
            try:
                shard.shutdown()
            except Exception:  # noqa: BLE001 - a dead shard is already down
                pass

    close = shutdown


    def __repr__(self) -> str:
        return f"ShardedReplayBuffer(num_shards={len(self.shards)}, batch_size={self.batch_size})"

    # -- helpers ---------------------------------------------------------------------------------

    def _actor(self, k: int) -> Any:
        return self.shards[k]._rb  # torchrl's actor of shard k

    def _on_every_shard(self, fn: Any, what: str) -> list[Any]:
        shards = list(range(len(self.shards)))
        values = self._get([self._actor(k).__ray_call__.remote(fn) for k in shards], shards, what)
        return self._observe(values) if fn is priority_stats else values

    def _observe(
        self, stats: list[tuple[float, float, int, int]]
    ) -> list[tuple[float, float, int, int]]:
        """Notes each shard's counts; a write count that went back is a shard Ray restarted empty."""
        for k, (_, _, held, written) in enumerate(stats):
            seen_written, seen_held = self._seen[k]
            if written < seen_written:
                self._lost += seen_held
                self._restarts += 1
                logger.warning(
                    "replay shard %d of %d died and was restarted empty: %d frames lost (those it "
                    "held at the last look); collection and learning go on",
                    k, len(self.shards), seen_held,
                )  # fmt: skip
            self._seen[k] = (written, held)
        return stats

    def _get(self, refs: Sequence[Any], shards: Sequence[int], what: str) -> list[Any]:
        values = []
        for ref, k in zip(refs, shards, strict=True):
            try:
                values.append(ray.get(ref, timeout=self.timeout_s))
            except GetTimeoutError:
                raise TimeoutError(
                    f"replay shard {k} did not answer {what} within {self.timeout_s:g} s"
                ) from None
            except RayActorError as err:
                raise ReplayBufferDied(
                    f"replay shard {k} of {len(self.shards)} died (during {what}) and was not "
                    f"restarted (max_restarts used up); its frames went with it. Resume from the "
                    f"last checkpoint. Ray: {str(err).splitlines()[0]}"
                ) from None
        return values

    def _collect_updates(self, wait_for: int) -> None:
        ready = {
            ref for ref in ray.wait([r for _, r in self._updates], num_returns=len(self._updates), timeout=0)[0]
        } if self._updates else set()  # fmt: skip
        kept = []
        for i, (k, ref) in enumerate(self._updates):
            if ref in ready or i < wait_for:
                dropped = self._get([ref], [k], "a priority update")[0]
                self._dropped += dropped
                self._updated += 1
            else:
                kept.append((k, ref))
        self._updates = kept
