"""EvalWorker: evaluation in a Ray actor of its own, on the weights it is sent.

Runs inside the actor (the driver's side is :mod:`tdscheme.engine.eval_pool`): it
builds the evaluation env once and keeps a copy of the policy module; each
:meth:`EvalWorker.evaluate` loads the weights it is given, seeds the env and plays
whole episodes with :func:`~tdscheme.engine.evaluation.evaluate`, as the Trainer does
inline. With ``spec.video`` it also records one episode of those weights on the same
seed, on a rendering env of its own, in a thread of low CPU priority
(:class:`~tdscheme.engine.video_clips.BackgroundVideos`): the evaluation's reply does
not wait for it; each reply brings the videos finished since the last one
(:class:`~tdscheme.engine.video_clips.VideoClip`, encoded), and
:meth:`EvalWorker.videos_done` the last ones at the end of a run. The video is made
here, beside training, never in the driver's step. The class is plain Python (the pool wraps it
with ``ray.remote``), so it runs in-process too.

Example:
    >>> from tensordict import TensorDict
    >>> from tdscheme.envs import make_env
    >>> from tdscheme.presets.actor_critic import actor_critic_modules
    >>> policy = actor_critic_modules("Pendulum-v1", hidden_sizes=(8,))["actor"]
    >>> worker = EvalWorker(0, EvalWorkerSpec(lambda: make_env("Pendulum-v1"), policy, 2, 500))
    >>> reply = worker.evaluate(TensorDict.from_module(policy).data, frames=100, seed=1)
    >>> reply.frames, len(reply.returns), reply.lengths
    (100, 2, (200, 200))
    >>> worker.shutdown()
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn

from tdscheme.engine.evaluation import EvalResult, evaluate
from tdscheme.engine.video_clips import BackgroundVideos, VideoClip, VideoSettings
from tdscheme.log_levels import configure_worker_logging

__all__ = ["EvalReply", "EvalWorker", "EvalWorkerSpec"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class EvalWorkerSpec:
    """What an eval worker is built from; small, so a dead one is rebuilt from it.

    Attributes:
        env_factory: builds the evaluation env.
        policy: the policy module (a copy travels to the actor); the weights sent
            to :meth:`EvalWorker.evaluate` are loaded into it.
        episodes: episodes per evaluation.
        max_steps: env steps after which an evaluation gives up.
        deterministic: act with the policy's mode (else sample).
        video: record a video of each evaluation that asks for one (its env is built
            with the worker); ``None``: no videos.
    """

    env_factory: Callable[[], Any]
    policy: nn.Module
    episodes: int
    max_steps: int
    deterministic: bool = True
    video: VideoSettings | None = None


@dataclasses.dataclass(frozen=True)
class EvalReply:
    """One evaluation: the frames the weights were trained on, the episodes, the seconds.

    ``key`` is the caller's name for the evaluation (:class:`~tdscheme.engine.eval_pool.EvalPool`
    sets it from its request: two checkpoints of one frame count stay apart), ``videos``
    the ``(frames, clip)`` of each video the worker finished since its last reply.
    """

    frames: int
    returns: tuple[float, ...]
    lengths: tuple[int, ...]
    seconds: float
    key: Any = None
    videos: tuple[tuple[int, VideoClip], ...] = ()

    @property
    def result(self) -> EvalResult:
        """The episodes as the Trainer's inline evaluation reports them."""
        return EvalResult(returns=self.returns, lengths=self.lengths)


class EvalWorker:
    """An evaluation env and a policy copy inside an actor (see the module).

    Args:
        worker_id: the worker's position in its pool.
        spec: the env factory, the policy, episodes and step limit.
        seed: unused (each evaluation brings its own seed, so a rebuilt worker
            plays the same episodes); kept for the pool's constructor signature.
        log_level: the driver's log level, applied in the worker's process.
    """

    def __init__(
        self,
        worker_id: int,
        spec: EvalWorkerSpec,
        *,
        seed: int | None = None,
        log_level: int | None = None,
    ) -> None:
        if log_level is not None:
            configure_worker_logging(log_level)
        # one thread, as the Trainer's default: small networks on shared cores run fastest so
        torch.set_num_threads(1)
        self.worker_id = worker_id
        self.spec = spec
        self.env = spec.env_factory()
        self.policy = spec.policy
        self.videos = None
        if spec.video is not None:  # a thread of low CPU priority: it records after evaluations
            self.videos = BackgroundVideos(
                spec.video, spec.policy, deterministic=spec.deterministic, lower_priority=True
            )
        logger.info("eval worker %d ready: %d episodes per evaluation", worker_id, spec.episodes)

    def ping(self) -> int:
        """Answered once the worker is built; returns its id."""
        return self.worker_id

    def evaluate(
        self, weights: TensorDictBase, frames: int, seed: int | None, video: bool = False
    ) -> EvalReply:
        """Loads ``weights``, seeds the env with ``seed`` and plays ``spec.episodes`` episodes.

        Args:
            weights: the policy's weights (``Learner.policy_weights()``).
            frames: the frames those weights were trained on (returned as is).
            seed: the env's seed for this evaluation (``None``: not reseeded).
            video: also record one episode on ``seed`` (needs ``spec.video``), after this
                reply: it comes with a later one, or from :meth:`videos_done`.

        Raises:
            ValueError: ``video`` without ``spec.video``.
        """
        if video and self.videos is None:
            raise ValueError("video=True is invalid without spec.video; accepted: False")
        start = time.perf_counter()
        weights.to_module(self.policy)
        if seed is not None:
            self.env.set_seed(seed)
        spec = self.spec
        result = evaluate(
            self.env, self.policy, episodes=spec.episodes, max_steps=spec.max_steps,
            deterministic=spec.deterministic,
        )  # fmt: skip
        seconds = time.perf_counter() - start
        if video:
            self.videos.submit(weights, frames=frames, seed=seed)
        done = tuple(self.videos.poll()) if self.videos is not None else ()
        return EvalReply(frames, result.returns, result.lengths, seconds, videos=done)

    def videos_done(self, timeout_s: float) -> list[tuple[int, VideoClip]]:
        """The videos not yet replied, once the one being recorded is done (``timeout_s`` at most).

        Returns:
            ``(frames, clip)`` of each; a video still recording after ``timeout_s`` is
            left out, with a warning.
        """
        if self.videos is None:
            return []
        try:
            return self.videos.drain(timeout_s)
        except TimeoutError:
            logger.warning("eval worker %d: a video still recording after %g s is left out",
                           self.worker_id, timeout_s)  # fmt: skip
            return self.videos.poll()

    def shutdown(self) -> None:
        """Closes the envs. Idempotent."""
        if not self.env.is_closed:
            self.env.close()
        if self.videos is not None:
            self.videos.close()
