"""BaseCollectorWorker: one torchrl collector, stepped on request, its batches stamped and encoded.

The worker is a plain Python class. :class:`~tdscheme.collectors.RayCollector`
wraps it with ``ray.remote`` (see :mod:`tdscheme.runtime.actor_pool`), and tests or a
debugging session can run it in-process unchanged.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import ray
import torch
from tensordict import TensorDictBase

from tdscheme.collectors.settings.specs import WorkerBatch, WorkerSpec
from tdscheme.collectors.worker.env_config import EnvConfigCalls
from tdscheme.episodes import EpisodeStarts, finished_episodes
from tdscheme.keys import MASK_KEY, POLICY_VERSION_KEY, WORKER_ID_KEY
from tdscheme.replay.frames import frames_to_write, without_nonfinite
from tdscheme.replay.n_step import NStepFrames
from tdscheme.replay.priorities import with_priorities
from tdscheme.replay.ray_held import BufferWriter
from tdscheme.rollout.env_config import EnvConfigPush
from tdscheme.rollout.input_checks import count_all_nonfinite, describe_nonfinite
from tdscheme.rollout.stamps import stamp_
from tdscheme.rollout.torchrl_names import is_multi_collector, next_trajectory_id
from tdscheme.rollout.worker_collector import WorkerCollector
from tdscheme.runtime.threads import set_up_actor_process
from tdscheme.transport import Payload, TensorDictCodec

logger = logging.getLogger(__name__)

__all__ = ["WORKER_STATE_KEY", "BaseCollectorWorker"]

#: The entry a worker adds to its torchrl collector's ``state_dict()``.
WORKER_STATE_KEY = "tdscheme"


class BaseCollectorWorker(EnvConfigCalls):
    """Steps one torchrl collector and returns encoded, stamped batches.

    Weights come from the driver (:meth:`set_weights`) or, when a torchrl learner
    publishes them (``learner_backend="ray"``), through torchrl's receiver calls, which
    :class:`~tdscheme.collectors.CollectorWorker` (the class a RayCollector's actors run)
    adds to this one.

    Args:
        worker_id: this worker's index, stamped on every frame.
        spec: how to build the collector.
        seed: seeds the envs when given.
        weights: initial policy weights (a TensorDict or an encoded payload).
        policy_version: the version of ``weights``.
        log_level: sets this process's tdscheme, torchrl and Ray loggers to it
            first (:func:`~tdscheme.log_levels.configure_worker_logging`); the
            pool of a RayCollector passes its driver's level. ``None``
            (in-process use) leaves logging alone.
        first_traj_id: a rebuilt worker's first trajectory id, past every id its
            earlier actors used (a torchrl ``Collector`` counts from it), so
            that no trajectory is spliced across a restart.
        frames_done: frames its earlier actors collected (``init_random_frames`` left).
        env_config: the env config its envs run from the start (a rebuilt worker's: the
            newest pushed to it), received as :meth:`set_env_config` receives one.
        reuse_batch_buffer: each reply is copied before the next :meth:`collect` (a Ray
            actor's: Ray serializes it first; a buffer write is answered before), so the
            encoded batch may view the collector's own batch buffer, not torchrl's copy
            (:meth:`~tdscheme.rollout.worker_collector.WorkerCollector.reuse_batch_buffer`).
        own_process: a Ray actor, its process's only tenant: ``reuse_batch_buffer`` too, and
            once built its objects (torch, torchrl, the env, the policy) leave the garbage
            collector's generations (``gc.freeze``: full collections stop walking them).

    Example:
        >>> from tdscheme.envs import make_env
        >>> from tdscheme.presets.actor_critic import actor_critic_modules
        >>> actor = actor_critic_modules("Pendulum-v1", hidden_sizes=(8,))["actor"]
        >>> spec = WorkerSpec(lambda: make_env("Pendulum-v1"), actor, frames_per_batch=10)
        >>> worker = BaseCollectorWorker(0, spec)
        >>> batch = worker.collect(0)
        >>> batch.frames, batch.policy_version
        (10, 0)
        >>> worker.shutdown()
    """

    def __init__(
        self,
        worker_id: int,
        spec: WorkerSpec,
        *,
        seed: int | None = None,
        weights: TensorDictBase | Payload | None = None,
        policy_version: int = 0,
        log_level: int | None = None,
        first_traj_id: int = 0,
        frames_done: int = 0,
        env_config: EnvConfigPush | None = None,
        reuse_batch_buffer: bool = False,
        own_process: bool = False,
    ) -> None:
        set_up_actor_process(log_level)
        self.worker_id = worker_id
        self.spec = spec
        self.policy_version = policy_version
        fold = spec.fold_next_bytes()
        writes = spec.replay_buffer is not None
        self._writer = BufferWriter(spec.replay_buffer, fold_next_bytes=fold) if writes else None
        # n-step returns: each env's last n steps wait here for the rewards after them
        self._n_step = NStepFrames(spec.n_step) if writes and spec.n_step is not None else None
        self._preempt_upto = -1
        self._staged_cond = threading.Condition()
        # held across a write's staleness check and the write, and by set_weights: once a
        # push is acknowledged, no write of frames it makes too stale is still in flight
        self._write_lock = threading.Lock()
        self._staged: tuple[TensorDictBase | Payload, int] | None = None
        self._rollout = WorkerCollector(
            spec.create_env_fn, spec.policy, frames_per_batch=spec.frames_per_batch,
            collector_class=spec.collector_class, collector_kwargs=spec.collector_kwargs,
            policy_factory=spec.policy_factory, worker_id=worker_id,
            num_workers_per_collector=spec.num_workers_per_collector,
            preemptible=spec.preemptible, first_traj_id=first_traj_id, frames_done=frames_done,
            env_config=env_config,
        )  # fmt: skip
        self._collector = self._rollout.collector  # torchrl's calls go to it (worker_calls)
        # a one-call NEXT_STEP env pads its reset steps (refused with a replay buffer)
        self._pads_reset_steps = self._rollout.pads_reset_steps(writes=writes)
        # a buffer's write ends before the reply; a reused buffer is sent as one storage
        reuses = (reuse_batch_buffer or own_process) and not spec.preemptible
        reuses = reuses and self._rollout.reuse_batch_buffer()
        self._codec = TensorDictCodec(spec.compress, fold_next_bytes=fold, keep_in_one_storage=reuses)  # fmt: skip
        if seed is not None:
            self.set_seed(seed)
        if weights is not None:
            self._load_weights(weights)
        self._all_nonfinite = 0  # batches in a row whose frames were all dropped for NaN / inf
        self._rows = False  # the ndim=1 storage warning given (worker 0)
        self._episode_starts = EpisodeStarts()  # the config each written episode started under
        if own_process:  # what it built lives as long as the process: out of the collections
            gc.freeze()
        logger.info(
            "collector worker %d ready: %s, %d frames per batch, seed %s, policy version %d",
            worker_id, type(self._collector).__name__, spec.frames_per_batch, seed, policy_version,
        )  # fmt: skip

    def collect(
        self,
        batch_id: int,
        min_policy_version: int = 0,
        max_frames: int | None = None,
        min_env_config_version: int = 0,
    ) -> WorkerBatch:
        """Collects one batch of ``spec.frames_per_batch`` frames.

        Args:
            batch_id: the driver's request id; a ``preempt(batch_id)`` received
                while collecting cuts this batch short.
            min_policy_version: the newest version pushed to this worker before
                the request; the batch waits (up to 60 s) for those weights, so a
                request made after a push never runs older weights.
            max_frames: with a replay buffer, the most frames to write (the
                driver's budget, so that none is written past ``total_frames``).
            min_env_config_version: the newest env config pushed to this worker before
                the request; the batch waits (up to 60 s) for it, as for weights.

        Returns:
            The encoded batch with its provenance (with a replay buffer: the
            counts of what was written).
        """
        start = time.perf_counter()
        self._apply_staged_weights(min_policy_version)
        self._rollout.env_config.wait_received(min_env_config_version)
        version = self.policy_version
        first_step = self._rollout.frames_seen
        if self.spec.preemptible:
            td, preempted = self._collect_steps(batch_id)
        else:
            td, preempted = self._rollout.next_batch(), False
        mask = td.get(MASK_KEY, None)  # padded trajectories or reset steps: the valid frames
        frames = td.numel() if mask is None else int(np.count_nonzero(mask.numpy(force=True)))
        reset_steps = td.numel() - frames if self._pads_reset_steps else 0  # padding, not steps
        nonfinite = describe_nonfinite(td, worker_id=self.worker_id, first_step=first_step)
        if nonfinite is not None:
            logger.warning("batch %d has %s", batch_id, nonfinite)
        stamp_(stamp_(td, WORKER_ID_KEY, self.worker_id), POLICY_VERSION_KEY, version)
        collected = time.perf_counter()
        batch = WorkerBatch(
            worker_id=self.worker_id,
            batch_id=batch_id,
            policy_version=version,
            frames=frames,
            preempted=preempted,
            payload=None,
            collect_s=collected - start,
            encode_s=0.0,
            next_traj_id=next_trajectory_id(self._collector),
            env_config_version=min(self._rollout.env_config.running_versions()),
            env_config_refused=tuple(self._rollout.env_config.take_refused()),
            reset_steps=reset_steps,
        )
        if self.spec.replay_buffer is None:
            batch.payload = self._codec.encode(td)
        else:
            whole, ndim = self.spec.whole_trajectories, self._writer.storage_ndim()
            if ndim == 1 and td.ndim > 1 and not whole and self.worker_id == 0 and not self._rows:
                self._rows = True  # said once: torchrl's rule, rarely what a batched-env user means
                logger.warning(
                    "collector worker 0 writes [num_envs, time] = %s batches into a replay buffer "
                    "whose storage has ndim=1: each env row of %d frames is one item, so a sample "
                    "of batch_size items holds batch_size x %d frames; to sample frames give the "
                    "storage ndim=2 (LazyTensorStorage(size, ndim=2))",
                    list(td.batch_size), td.batch_size[-1], td.batch_size[-1],
                )  # fmt: skip
            if self._n_step is not None:  # before the budget cut: the held steps stay whole
                stepped = td.numel()
                td = self._n_step(td)
                batch.frames_held_back = stepped - td.numel()
                if nonfinite is None and self.spec.drop_nonfinite_frames:  # NaN out of hold
                    nonfinite = describe_nonfinite(td, worker_id=self.worker_id, first_step=first_step)
            td, batch.frames_discarded = frames_to_write(
                td, max_frames, whole_trajectories=whole, storage_ndim=ndim
            )
            if self.spec.drop_nonfinite_frames:  # the batch was scanned once above
                kept, batch.frames_dropped = (
                    (td, 0)
                    if nonfinite is None
                    else without_nonfinite(td, whole_trajectories=whole, storage_ndim=ndim)
                )
                self._all_nonfinite = count_all_nonfinite(
                    self._all_nonfinite, td, kept,
                    worker_id=self.worker_id, first_step=first_step,
                )  # fmt: skip
                td = kept
            batch.frames = td.batch_size.numel()  # TensorDict.numel() is 1 for an empty batch
            with self._write_lock:
                if self._too_stale(version):
                    batch.frames, batch.frames_dropped = 0, batch.frames + batch.frames_dropped
                elif batch.frames:
                    # the reply goes with the write: if this worker dies before replying,
                    # the driver finds it in the buffer (replay.last_write)
                    batch.episodes = finished_episodes(td, self._episode_starts)
                    if self.spec.priority_fn is not None:  # Ape-X: the worker's own TD errors
                        td = with_priorities(td, self.spec.priority_fn, self._collector.policy)
                    self._writer.extend(td, record=batch)
        batch.encode_s = time.perf_counter() - collected
        return batch

    def _too_stale(self, version: int) -> bool:
        """Whether frames of ``version`` lag the newest weights received by more than the bound."""
        if self.spec.max_policy_lag is None:
            return False
        with self._staged_cond:
            newest = max(self.policy_version, self._staged[1] if self._staged else 0)
        return newest - version > self.spec.max_policy_lag

    def _collect_steps(self, batch_id: int) -> tuple[TensorDictBase, bool]:
        steps: list[TensorDictBase] = []
        frames = 0
        while frames < self.spec.frames_per_batch:
            if steps and self._preempt_upto >= batch_id:
                break
            step = self._rollout.next_batch()
            steps.append(step)
            frames += step.numel()
        td = torch.cat(steps, dim=-1) if len(steps) > 1 else steps[0]
        return td, frames < self.spec.frames_per_batch

    @ray.method(concurrency_group="control")
    def preempt(self, batch_id: int) -> None:
        """Asks the running (or queued) batch ``batch_id`` to stop at its next step boundary.

        Runs in the actor's ``control`` concurrency group, so it is served while
        ``collect`` runs. A batch always keeps at least one step.
        """
        self._preempt_upto = max(self._preempt_upto, batch_id)

    @ray.method(concurrency_group="control")
    def progress(self) -> int:
        """Env steps taken so far (frames), answered even while collecting."""
        return self._rollout.progress()

    @ray.method(concurrency_group="control")
    def started(self) -> dict[str, Any]:
        """The driver's one start-up question: ``{"batch_frames", "fast_path"}``.

        ``batch_frames`` is :meth:`batch_frames`; ``fast_path`` is ``True`` when the
        collector runs tdscheme's lean rollout, else why torchrl's rollout runs
        (:func:`~tdscheme.rollout.worker_collector.fast_path`).
        """
        return {"batch_frames": self.batch_frames(), "fast_path": self._rollout.fast_path()}

    @ray.method(concurrency_group="control")
    def batch_frames(self) -> int | None:
        """Frames one whole batch has; ``None`` when its size is not fixed.

        ``spec.frames_per_batch`` rounded up to whole env steps, as torchrl's
        collector rounds it (a preemptible worker steps until it has as many).
        ``None`` for whole trajectories (``trajs_per_batch``) and for a collector
        that does not say (torchrl's multi-process collectors split and round
        the batch per process; a user's class may size its batches itself).
        """
        per_call = getattr(self._collector, "requested_frames_per_batch", None)
        if self.spec.whole_trajectories or per_call is None:
            return None
        if is_multi_collector(self.spec.collector_class):
            return None
        if self.spec.preemptible:  # one env step per call, until the batch is full
            return -(-self.spec.frames_per_batch // per_call) * per_call
        return int(per_call)

    @ray.method(concurrency_group="control")
    def ping(self) -> int:
        """Liveness check answered even while collecting; returns the worker id."""
        return self.worker_id

    @ray.method(concurrency_group="control")
    def set_weights(self, weights: TensorDictBase | Payload, policy_version: int) -> int:
        """Receives policy weights; the next batch to start runs them and is stamped ``policy_version``.

        Runs in the ``control`` group, so it is answered while a batch is being
        collected: the weights are staged and applied when the next batch
        starts (a batch never mixes two versions). A newer push replaces an
        older one that was not applied yet. With a replay buffer it waits for a
        write in flight, so that once it is acknowledged no frames it makes
        too stale (``max_policy_lag``) reach the buffer.

        Returns:
            ``policy_version`` (the acknowledgement that the weights arrived).
        """
        with self._write_lock, self._staged_cond:
            if self._staged is None or self._staged[1] < policy_version:
                self._staged = (weights, policy_version)
            self._staged_cond.notify_all()
        return policy_version

    def _apply_staged_weights(self, min_policy_version: int = 0, timeout_s: float = 60.0) -> None:
        def arrived() -> bool:
            newest = self._staged[1] if self._staged is not None else self.policy_version
            return max(newest, self.policy_version) >= min_policy_version

        with self._staged_cond:
            if not self._staged_cond.wait_for(arrived, timeout=timeout_s):
                raise TimeoutError(
                    f"worker {self.worker_id}: weights version {min_policy_version} did not "
                    f"arrive within {timeout_s} s (running version {self.policy_version})"
                )
            staged, self._staged = self._staged, None
        if staged is not None:
            self._load_weights(staged[0])
            self.policy_version = staged[1]

    def _set_running_version(self, policy_version: int | None) -> None:
        """Weights were loaded outside :meth:`set_weights` (a torchrl learner's publication).

        The next batch is stamped ``policy_version`` (the learner's model version;
        ``None``: one more than the current version).
        """
        with self._staged_cond:
            self.policy_version = (
                self.policy_version + 1 if policy_version is None else int(policy_version)
            )

    def _load_weights(self, weights: TensorDictBase | Payload) -> None:
        if isinstance(weights, Payload):
            weights = self._codec.decode(weights)
        if weights.is_empty():
            return
        self._collector.update_policy_weights_(weights)

    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Seeds the worker's envs and torch's RNG, and resets the envs.

        torch's RNG drives the policy's exploration (e.g. sampling a categorical
        action); torchrl's ``set_seed`` seeds the envs only. A worker actor owns its
        process, so seeding the process-wide RNG makes its batches reproducible.

        Args:
            seed: the seed.
            static_seed: torchrl's: every env copy gets ``seed`` itself.

        Returns:
            The seed torchrl chains to next.
        """
        return self._rollout.set_seed(seed, static_seed)

    def state_dict(self) -> dict[str, Any]:
        """The wrapped torchrl collector's state (as torchrl's) plus this worker's policy version.

        Returns:
            The collector's own ``state_dict()`` with a ``"tdscheme"`` entry,
            ``{"policy_version", "env_config"}`` (the newest env config received, or
            ``None``), which torchrl's ``load_state_dict`` ignores.
        """
        state = self._collector.state_dict()
        env_config = self._rollout.env_config.state_dict()
        state[WORKER_STATE_KEY] = {"policy_version": self.policy_version, "env_config": env_config}
        return state

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = False) -> None:
        """Restores :meth:`state_dict`, or any state of the wrapped torchrl collector.

        Args:
            state: a :meth:`state_dict`, or a torchrl collector's ``state_dict()``
                (the policy version is then left as it is).
            strict: passed to the torchrl collector's ``load_state_dict``; ``False``
                (torchrl RayCollector's choice) loads what the state holds.
        """
        state = dict(state)
        own = state.pop(WORKER_STATE_KEY, None)
        self._collector.load_state_dict(state, strict=strict)
        if own is not None:
            self.policy_version = int(own["policy_version"])
            self._rollout.env_config.load_state_dict(own.get("env_config"))

    def shutdown(self) -> None:
        """Closes the wrapped collector and its envs. Idempotent."""
        self._collector = None
        self._rollout.shutdown()
