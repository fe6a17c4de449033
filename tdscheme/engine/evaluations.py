"""Evaluations: when a Trainer evaluates, where (inline or on eval workers), and what it records.

Inline (``eval_workers=0``): at each due point the driver plays ``eval_episodes``
episodes itself while training waits, as it always did. With eval workers
(``eval_workers=k``, an :class:`~tdscheme.engine.eval_pool.EvalPool`) the newest
weights go to an idle worker and training goes on; each result is recorded when it
arrives, at the frame count of the weights it evaluated (``eval/latency_s`` says how
much later), and ``target_return`` stops the run from it. A due evaluation that finds
every worker busy waits for the first that frees; newer weights replace it meanwhile
(the replaced one is counted in ``eval/skipped``).

Either way evaluation ``i`` seeds its env with the run's ``i``-th evaluation seed, so
the same weights give the same episodes inline and on a worker.

Videos (``video=True``) never hold a training step: the eval worker records one after
its evaluation, at a low CPU priority, without holding its reply, or, inline, a thread of
the driver does (:class:`~tdscheme.engine.video_clips.BackgroundVideos`; either way
newer weights replace a video still waiting for its turn); each is handed over when it
arrives, at the frame count of the weights it shows.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from tdscheme.engine.eval_pool import EvalPool
from tdscheme.engine.eval_worker import EvalWorkerSpec
from tdscheme.engine.evaluation import EvalResult, evaluate
from tdscheme.engine.seeding import worker_seeds
from tdscheme.engine.trainer_config import TrainerConfig
from tdscheme.engine.video_clips import BackgroundVideos, ClipMaker, VideoClip, VideoSettings
from tdscheme.errors import EvalWorkerError
from tdscheme.scheme import Scheme

__all__ = ["Evaluations"]

logger = logging.getLogger(__name__)


class Evaluations:
    """A Trainer's evaluations (see the module).

    Args:
        config: the Trainer's settings (``eval_*``, ``target_return``).
        scheme: the run's scheme: its policy, weights and eval env factory.
        counters: the Trainer's counters, updated in place (``last_eval_frames``,
            ``evaluations``, ``eval_return``, ``eval_return_std``, ``target_frames``,
            ``target_elapsed_s``), so that checkpoints hold them.
        log: logs a dict of metrics at a frame count.
        elapsed_s: the run's wall time so far.
        videos: record one episode of each evaluation's weights, on its seed; ``None``: none.
        on_video: takes each video with the frame count of its weights (the Trainer
            writes it into the run directory and logs it).

    Raises:
        ImportError, RuntimeError: ``videos``' env cannot render (before any worker starts).
    """

    def __init__(
        self,
        config: TrainerConfig,
        scheme: Scheme,
        counters: dict[str, Any],
        *,
        log: Callable[[dict[str, float], int], None],
        elapsed_s: Callable[[], float],
        videos: VideoSettings | None = None,
        on_video: Callable[[VideoClip, int], None] | None = None,
    ) -> None:
        self.config = config
        self.scheme = scheme
        self.counters = counters
        self._log = log
        self._elapsed_s = elapsed_s
        self._env: Any = None
        self._pool: EvalPool | None = None
        # evaluation index -> (monotonic, elapsed_s) when sent: the key of its reply
        self._sent_at: dict[int, tuple[float, float]] = {}
        self._video_settings = videos
        self._on_video = on_video
        self._videos: BackgroundVideos | None = None
        if videos is not None and config.eval_workers:
            ClipMaker(videos).close()  # the env renders: said here, not by a worker later
        elif videos is not None:
            self._videos = BackgroundVideos(videos, scheme.policy)
        if config.eval_workers:  # started now, built while training starts
            self._workers()

    def due(self, frames: int) -> bool:
        """Whether ``eval_every_frames`` frames passed since the last evaluation."""
        every, last = self.config.eval_every_frames, self.counters["last_eval_frames"]
        return every > 0 and frames - max(last, 0) >= every

    def evaluate(self, episodes: int | None = None) -> EvalResult:
        """Plays the policy on the driver's eval env now (the next evaluation seed)."""
        if self._env is None:
            self._env = (self.scheme.eval_env_factory or self.scheme.env_factory)()
        seed = self._next_seed()
        if seed is not None:
            self._env.set_seed(seed)
        return evaluate(
            self._env, self.scheme.policy, episodes=episodes or self.config.eval_episodes,
            max_steps=self.config.eval_max_steps,
        )  # fmt: skip

    def start(self, frames: int) -> float | None:
        """Evaluates the weights at ``frames``: inline (returns the mean return) or on a worker.

        With eval workers it returns ``None`` at once; :meth:`collect` records the result.
        """
        self.counters["last_eval_frames"] = frames
        index = self.counters["evaluations"]
        seed = self._seed_at(index)
        if not self.config.eval_workers:
            start = time.perf_counter()
            result = self.evaluate()
            self._record(result, frames, {"time/eval_s": time.perf_counter() - start})
            if self._videos is not None:  # recorded by the thread while training goes on
                weights = self.scheme.learner.policy_weights()
                self._videos.submit(weights, frames=frames, seed=seed)
            return result.mean_return
        pool = self._workers()
        pool.start_evaluation(
            self.scheme.learner.policy_weights(), frames=frames, seed=seed, key=index,
            video=self._video_settings is not None,
        )  # fmt: skip
        self.counters["evaluations"] += 1  # started or queued: either way its seed is used
        self._sent_at[index] = (time.monotonic(), self._elapsed_s())
        self._log({"eval/skipped": float(pool.skipped)}, frames)
        return None

    def collect(self, timeout_s: float = 0.0) -> float | None:
        """Records the evaluations the workers finished (waiting at most ``timeout_s``), and
        hands over the videos the driver's thread finished.

        Returns:
            The newest evaluation's mean return, or ``None`` when none finished.
        """
        replies = self._pool.poll(timeout_s) if self._pool is not None else []
        for reply in replies:
            self._record_reply(reply)
        if self._videos is not None:
            for frames, clip in self._videos.poll():
                self._on_video(clip, frames)
        return replies[-1].result.mean_return if replies else None

    def finish(self, frames: int, *, final: bool, timeout_s: float) -> None:
        """At the end of a run: the final evaluation (``final``), then every result and video
        in flight (at most ``timeout_s`` for each kind)."""
        if final and self.counters["last_eval_frames"] != frames:
            self.start(frames)
        if self._pool is not None:
            for reply in self._pool.drain(timeout_s):
                self._record_reply(reply)
            if self._video_settings is not None:
                self._drain_worker_videos(timeout_s)
        if self._videos is not None:
            for video_frames, clip in self._videos.drain(timeout_s):
                self._on_video(clip, video_frames)

    def close(self) -> None:
        """Closes the eval env, stops the eval workers and the video thread. Idempotent."""
        if self._env is not None:
            self._env.close()
            self._env = None
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        if self._videos is not None:
            self._videos.close()
            self._videos = None

    # -- recording ---------------------------------------------------------------------------

    def _record_reply(self, reply: Any) -> None:
        sent, elapsed = self._sent_at.pop(reply.key, (time.monotonic(), self._elapsed_s()))
        for index in [i for i in self._sent_at if i < reply.key]:  # replaced while queued
            del self._sent_at[index]
        extra = {"time/eval_s": reply.seconds, "eval/latency_s": time.monotonic() - sent}
        extra["eval/restarts"] = float(sum(self._pool.restarts())) if self._pool else 0.0
        self._record(reply.result, reply.frames, extra, elapsed_s=elapsed)
        for frames, clip in reply.videos:  # those the worker finished since its last reply
            self._on_video(clip, frames)

    def _drain_worker_videos(self, timeout_s: float) -> None:
        try:
            videos = self._pool.drain_videos(timeout_s)
        except EvalWorkerError as err:  # the run's results stand; its last videos are lost
            logger.warning("the eval workers' last videos are lost: %s", err)
            return
        for frames, clip in videos:
            self._on_video(clip, frames)

    def _record(
        self,
        result: EvalResult,
        frames: int,
        extra: dict[str, float],
        *,
        elapsed_s: float | None = None,
    ) -> None:
        c = self.counters
        c["eval_return"], c["eval_return_std"] = result.mean_return, result.std_return
        metrics = {**result.metrics(), **extra}
        target = self.config.target_return
        if target is not None and result.mean_return >= target and c["target_frames"] is None:
            elapsed = self._elapsed_s() if elapsed_s is None else elapsed_s
            c["target_frames"], c["target_elapsed_s"] = frames, elapsed
            metrics["eval/target_reached"] = 1.0
            metrics["eval/target_elapsed_s"] = elapsed
            logger.info(
                "eval return %.1f >= target %.1f at %d frames, %.1f s",
                result.mean_return, target, frames, elapsed,
            )  # fmt: skip
        self._log(metrics, frames)

    # -- eval workers and seeds ----------------------------------------------------------------

    def _workers(self) -> EvalPool:
        if self._pool is None:
            cfg = self.config
            spec = EvalWorkerSpec(
                env_factory=self.scheme.eval_env_factory or self.scheme.env_factory,
                policy=self.scheme.policy, episodes=cfg.eval_episodes, max_steps=cfg.eval_max_steps,
                video=self._video_settings,
            )  # fmt: skip
            resources = cfg.eval_worker_resources
            self._pool = EvalPool(
                spec, cfg.eval_workers,
                remote_options=dict({"num_cpus": 0} if resources is None else resources),
                max_restarts=self.scheme.config.max_restarts, timeout_s=cfg.eval_timeout_s,
            )  # fmt: skip
        return self._pool

    def _next_seed(self) -> int | None:
        seed = self._seed_at(self.counters["evaluations"])
        self.counters["evaluations"] += 1
        return seed

    def _seed_at(self, index: int) -> int | None:
        seed = self.scheme.config.seed
        return None if seed is None else worker_seeds(seed, index + 1)[index]
