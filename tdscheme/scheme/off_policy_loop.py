"""OffPolicyLoop: collect into a replay buffer, learn from its samples at an update-to-data ratio.

One of the Scheme's training loops (see :mod:`tdscheme.scheme.scheme`), chosen when the
Scheme has a ``storage_factory``. The buffer lives where ``SchemeConfig.buffer_location``
says:

* ``"driver"``: a torchrl buffer in this process. The RayCollector's workers
  collect ahead while the learner trains (``prefetch_batches``); each step takes
  one batch, extends the buffer with its valid frames (flattened) and trains;
* ``"ray"``: a Ray-held ``RayReplayBuffer``; the workers write into it
  themselves (``RayCollector(replay_buffer=...).start()``, collection in a
  background thread), and each step trains on what was written since the last one,
  up to ``frames_per_batch`` (it waits, up to ``batch_timeout_s``, until something
  was; the rest waits for the next steps, ``replay/frames_pending``). The learner
  paces the writers: once ``prefetch_batches`` (at least 1) steps' frames wait for
  it, no new request is sent until a step takes them (``start(hold_while=...)``),
  so the workers never outrun the ``utd_ratio`` the learner keeps.

Either way a step takes ``utd_ratio`` gradient steps per frame collected after the
first ``init_random_frames`` (random actions, torchrl's collectors' rule; fractions
carry over), anneals the policy's exploration by the frames collected, and pushes
the weights at the end of the step once ``weight_push_interval`` updates are done.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDictBase

from tdscheme.collectors import RayCollector
from tdscheme.episodes import EpisodeStarts, FinishedEpisodes, finished_episodes
from tdscheme.keys import MASK_KEY
from tdscheme.learner import OffPolicyLearner, is_prioritized
from tdscheme.learner.group import LearnerGroup
from tdscheme.learner.snapshots import cpu_module
from tdscheme.replay.bounded import BoundedRayBuffer
from tdscheme.replay.frames import without_nonfinite
from tdscheme.replay.ray_held import is_ray_replay_buffer, samples_by_priority
from tdscheme.replay.sharded import ShardedReplayBuffer
from tdscheme.runtime import RayLease
from tdscheme.scheme.config import SchemeConfig
from tdscheme.scheme.loop import CollectorEnvConfigs, PushInterval
from tdscheme.scheme.metrics import finished_metrics, numeric_stats

__all__ = ["OffPolicyLoop", "check_buffer"]

logger = logging.getLogger(__name__)

#: seconds between looks at the frames written while waiting for the workers' writes
_POLL_S = 0.005


def check_buffer(buffer: Any, location: str) -> None:
    """Raises unless ``buffer`` is the kind of torchrl buffer ``location`` asks for.

    Raises:
        TypeError: ``buffer`` is no replay buffer, or lives elsewhere than ``location``.
    """
    if not callable(getattr(buffer, "sample", None)) or not callable(
        getattr(buffer, "extend", None)
    ):
        raise TypeError(
            f"storage_factory returned {type(buffer).__name__}; accepted: a torchrl replay "
            f"buffer (TensorDictReplayBuffer, TensorDictPrioritizedReplayBuffer, RayReplayBuffer)"
        )
    ray_held = is_ray_replay_buffer(buffer)
    if ray_held != (location == "ray"):
        raise TypeError(
            f"storage_factory returned a {'Ray-held' if ray_held else 'local'} "
            f"{type(buffer).__name__} but buffer_location={location!r}; accepted: "
            + (
                "a RayReplayBuffer (or ReplayBuffer(..., service_backend='ray')) with "
                "buffer_location='ray'"
                if location == "ray"
                else "a buffer in this process (e.g. TensorDictReplayBuffer) with "
                "buffer_location='driver'"
            )
        )


class OffPolicyLoop(CollectorEnvConfigs):
    """Collect into a replay buffer -> sample -> learn -> push, at ``utd_ratio``.

    A :class:`~tdscheme.scheme.loop.TrainingLoop` without a coordinator.

    Args:
        config: the Scheme's settings (``num_grad_workers == 0``).
        env_factory: builds one collector worker's env.
        learner: the driver's :class:`~tdscheme.learner.OffPolicyLearner` (its
            ``policy`` runs in the workers), or a learner group over it whose ranks
            sample the Ray-held buffer (``num_learners > 0``).
        storage_factory: builds the replay buffer (local or Ray-held, as
            ``config.buffer_location``); for a Ray-held one, Ray is started or joined
            first, by tdscheme's one entry point (``config.ray_init_config``).

    Raises:
        TypeError: ``learner`` is not an OffPolicyLearner, or the buffer does not
            match ``buffer_location``.
    """

    #: The key of this loop's part of ``Scheme.state_dict()``.
    state_key = "replay"
    collector: RayCollector
    coordinator: None = None
    episodes: FinishedEpisodes | None = None  # those that ended in the last step
    replay_buffer: Any
    frame_limit: int | None

    def __init__(
        self,
        config: SchemeConfig,
        *,
        env_factory: Callable[[], Any],
        learner: OffPolicyLearner | LearnerGroup,
        storage_factory: Callable[[], Any],
    ) -> None:
        if not isinstance(getattr(learner, "learner", learner), OffPolicyLearner):
            raise TypeError(
                f"learner_factory returned a {type(learner).__name__}; accepted with a "
                f"storage_factory: a tdscheme OffPolicyLearner (gradient steps on samples)"
            )
        self.config = config
        self.learner = learner
        self._episode_starts = EpisodeStarts()  # each episode counted at its start's config
        location = config.replay_location()
        self.ray_held = location == "ray"
        if self.ray_held and config.buffer_location == "auto":
            logger.warning(
                "num_learners=%d: the replay buffer is Ray-held (buffer_location='ray'), so "
                "that each learner rank samples it", config.num_learners,
            )  # fmt: skip
        self.replay_buffer = None
        self._lease = RayLease.acquire(config.ray_init_config) if self.ray_held else None
        try:
            buffer = storage_factory()
            check_buffer(buffer, location)
            # the learner's and the checkpoints' calls on a Ray-held buffer are bounded, its
            # samples prefetched (not a prioritized buffer's: see BoundedRayBuffer)
            if isinstance(buffer, ShardedReplayBuffer):  # its calls bounded, sampled by priority
                self.prioritized = True
                self.replay_buffer = buffer
            elif self.ray_held:
                self.prioritized = samples_by_priority(buffer, config.batch_timeout_s)
                self.replay_buffer = BoundedRayBuffer(
                    buffer, config.batch_timeout_s, prefetch=0 if self.prioritized else 1,
                    prioritized=self.prioritized,
                )  # fmt: skip
            else:
                self.prioritized = is_prioritized(buffer)
                self.replay_buffer = buffer
            self.collector = RayCollector.from_config(
                config.collector_config(
                    env_factory,
                    cpu_module(learner.policy),
                    replay_buffer=buffer if self.ray_held else None,
                    offpolicy=True,
                    drop_nonfinite_frames=learner.config.drop_nonfinite_frames,
                )
            )
        except BaseException:
            self._release()
            raise
        self._batches: Iterator[TensorDictBase | None] | None = None
        self.frames_collected = 0  # frames in (or written to) the buffer by this run
        self.frame_limit: int | None = None  # the Scheme's total_frames (set_total_frames)
        self.nonfinite_frames_dropped = 0  # left out of a driver-held buffer for NaN / inf
        self.updates = 0
        self._update_credit = 0.0
        self._push = PushInterval(config.weight_push_interval)
        self._extend_s = 0.0

    @property
    def frames_pending(self) -> int:
        """Frames the workers wrote into a Ray-held buffer that no step counted yet (else 0).

        Up to ``frame_limit``: a run resumed with a smaller ``total_frames`` than its
        buffer's writes (the workers run ahead of the learner) ends at it, the rest of
        the frames staying in the buffer.
        """
        if not self.ray_held:
            return 0
        written = self.collector.collected_frames - self.frames_collected
        if self.frame_limit is not None:
            written = min(written, self.frame_limit - self.frames_collected)
        return max(0, written)

    # -- one step ---------------------------------------------------------------------

    def step(self) -> tuple[int, dict[str, float]]:
        """Collects (or waits for the workers' writes), then takes the due gradient steps.

        Returns:
            ``(frames collected into the buffer, metrics)``: ``time/wait_s``,
            ``time/learn_s``, episodes (``train/episode_return``: of a Ray-held
            buffer, those the workers wrote since the last step), ``learner/<name>``
            (means over the step's updates), ``replay/<name>`` (see
            :meth:`replay_metrics`), ``policy_lag/*`` of the sampled frames and
            ``collector/<name>``.

        Raises:
            TimeoutError: ``"ray"``: nothing was written for ``batch_timeout_s``.
            RuntimeError: background collection stopped on an error.
        """
        start = time.perf_counter()
        metrics: dict[str, float] = {}
        if self.ray_held:
            frames = self._await_writes()
            self.episodes = self.collector.written_episodes()
        else:
            batch = self._next_batch()
            frames = self._extend(batch)
            self.episodes = finished_episodes(batch, self._episode_starts)
        metrics.update(finished_metrics(self.episodes))
        collected = time.perf_counter()
        self.learner.anneal_exploration_(frames)
        learning_frames = self._learning_frames(frames)
        self.frames_collected += frames
        self._update_credit += learning_frames * self.config.utd_ratio
        num_updates = math.floor(self._update_credit + 1e-9)
        self._update_credit -= num_updates
        updates = self.learner.replay_updates(
            self.replay_buffer, num_updates, write_priorities=self.prioritized,
            newest_policy_version=self.collector.policy_version,
        )  # fmt: skip
        self.updates += num_updates
        learned = time.perf_counter()
        # a step skipped for NaN / inf changed no weight: it is not counted toward a push
        done = sum(1 for u in updates if not float(u.get("nonfinite_skipped", 0.0)))
        if self._push.count(done):
            self.push_weights()
        metrics.update({"time/wait_s": collected - start, "time/learn_s": learned - collected})
        metrics.update(_mean_metrics(updates))
        metrics.update(self.replay_metrics(num_updates))
        # the driver's own counters: a step never waits on a ping of every worker
        metrics.update(numeric_stats(self.collector.counters(), "collector"))
        return frames, metrics

    def replay_metrics(self, num_updates: int) -> dict[str, float]:
        """``replay/size``, ``frames_collected``, ``updates``, ``updates_per_step``,
        ``utd_ratio`` (updates per frame collected after ``init_random_frames``, over
        the run), ``extend_ms`` (driver buffers: time extending it, over the run)."""
        learning = max(0, self.frames_collected - self.config.init_random_frames)
        return {
            "replay/size": float(len(self.replay_buffer)),
            "replay/frames_collected": float(self.frames_collected),
            "replay/updates": float(self.updates),
            "replay/updates_per_step": float(num_updates),
            "replay/utd_ratio": self.updates / learning if learning else 0.0,
            "replay/extend_ms": 1e3 * self._extend_s,
            "replay/frames_pending": float(self.frames_pending),
            # a Ray-held buffer's workers count theirs in collector/frames_dropped
            "replay/nonfinite_frames_dropped": float(self.nonfinite_frames_dropped),
        }

    def _learning_frames(self, frames: int) -> int:
        """The frames of this step collected after the first ``init_random_frames``."""
        warmup_left = max(0, self.config.init_random_frames - self.frames_collected)
        return max(0, frames - warmup_left)

    def _next_batch(self) -> TensorDictBase:
        if self._batches is None:
            self._batches = iter(self.collector)
        return next(self._batches)

    def _extend(self, batch: TensorDictBase) -> int:
        """Extends the buffer with a batch's valid frames (finite ones with ``drop_nonfinite_frames``)."""
        start = time.perf_counter()
        mask = batch.get(MASK_KEY, None)
        flat = batch[mask.bool()] if mask is not None else batch.reshape(-1)
        kept = flat
        if self.learner.config.drop_nonfinite_frames:
            kept, dropped = without_nonfinite(flat, whole_trajectories=False)
            self.nonfinite_frames_dropped += dropped
        if kept.shape[0]:
            self.replay_buffer.extend(kept)
        self._extend_s += time.perf_counter() - start
        return flat.shape[0]

    def _writers_ahead(self) -> bool:
        """Whether the frames waiting for the learner make ``prefetch_batches`` steps' worth."""
        ahead = max(1, self.config.prefetch_batches or 1) * self.config.frames_per_batch
        return self.frames_pending >= ahead

    def _await_writes(self) -> int:
        if not self.collector.is_running:
            self.collector.start(hold_while=self._writers_ahead)
        deadline = time.monotonic() + self.config.batch_timeout_s
        while True:
            written = self.frames_pending
            if written > 0:  # a step's worth: the workers may run far ahead of the learner
                return min(written, self.config.frames_per_batch)
            if not self.collector.is_running:  # re-raises the error that stopped it
                self.collector.start(hold_while=self._writers_ahead)
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"no frame was written into the replay buffer for batch_timeout_s="
                    f"{self.config.batch_timeout_s} s (workers alive: "
                    f"{self.collector.stats(timeout=1.0).get('workers_alive')})"
                )
            time.sleep(_POLL_S)

    # -- the loop surface -----------------------------------------------------------

    def push_weights(self) -> None:
        """Sends the learner's policy weights (with its exploration state) to every worker."""
        self.collector.update_policy_weights_(self.learner.policy_weights())
        self._push.pushed()

    def state_dict(self) -> dict[str, Any]:
        """``{"learner", "updates_since_push", "replay", "collector"}``; the buffer itself is
        :meth:`dump_buffer`'s."""
        return {
            "learner": self.learner.state_dict(),
            **self._push.state_dict(),
            "replay": {
                "frames_collected": self.frames_collected,
                "updates": self.updates,
                "update_credit": self._update_credit,
            },
            "collector": self.collector.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict` and pushes the restored weights."""
        self.learner.load_state_dict(state["learner"])
        self.collector.load_state_dict(state["collector"])
        replay = state["replay"]
        self.frames_collected = int(replay["frames_collected"])
        self.updates = int(replay["updates"])
        self._update_credit = float(replay["update_credit"])
        self.push_weights()
        self._push.load_state_dict(state)  # after the push, which restarts the count

    def paused(self) -> contextlib.AbstractContextManager[None]:
        """Holds the workers' background writes (Ray-held buffer) inside the ``with`` block.

        The buffer and the frame counters then stay still, so that a state and a
        buffer dump taken inside it agree; a driver-held buffer only changes in
        :meth:`step`, so nothing is held.
        """
        if self.ray_held and self.collector.is_running:
            return self.collector.pause(timeout=self.config.batch_timeout_s)
        return contextlib.nullcontext()

    def dump_buffer(self, path: str | Path) -> None:
        """Writes the buffer with torchrl's ``dumps`` (workers paused for a Ray-held one)."""
        with self.paused():
            self.replay_buffer.dumps(str(path))

    def load_buffer(self, path: str | Path) -> None:
        """Reads a buffer written by :meth:`dump_buffer` (torchrl's ``loads``)."""
        self.replay_buffer.loads(str(path))

    def set_seed(self, seed: int) -> int:
        """Reseeds every collector worker distinctly from ``seed``."""
        return self.collector.set_seed(seed)

    def shutdown(self) -> None:
        """Stops the collector workers, and the buffer's actor when it is Ray-held. Idempotent."""
        try:
            self.collector.shutdown()
        finally:
            if isinstance(self.learner, LearnerGroup):
                self.learner.shutdown()
            self._release()

    def _release(self) -> None:
        if self.ray_held:  # the buffer's actor goes with the run (a local one stays readable)
            buffer, self.replay_buffer = self.replay_buffer, None
            if buffer is not None:  # a BoundedRayBuffer: its shutdown is bounded
                buffer.shutdown()
        if self._lease is not None:
            self._lease.release()
            self._lease = None


def _mean_metrics(updates: list[TensorDictBase]) -> dict[str, float]:
    """The updates' metrics (means; maxima for ``*_max``) as ``learner/<name>`` and ``policy_lag/*``."""
    if not updates:
        return {}
    out: dict[str, float] = {}
    keys = dict.fromkeys(key for u in updates for key in u.keys())  # a skipped one has fewer
    for key in keys:
        values = torch.stack([u[key] for u in updates if key in u.keys()])
        value = float(values.max() if key.endswith("_max") else values.mean())
        if key.startswith("policy_lag_"):
            out[f"policy_lag/{key[len('policy_lag_') :]}"] = value
        else:
            out[f"learner/{key}"] = value
    return out
