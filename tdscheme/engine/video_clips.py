"""Videos off the training loop: each recorded where it holds no training step, as a small clip.

A :class:`~tdscheme.engine.Trainer` with ``video=True`` records one episode at each
evaluation. Training does not wait for it: with eval workers the worker that runs the
evaluation records the video after it (:class:`~tdscheme.engine.eval_worker.EvalWorker`),
and with inline evaluation a thread of the driver does (:class:`BackgroundVideos`).
Either way the episode becomes a :class:`VideoClip` where it was recorded: the H.264 mp4
as bytes (and the animated GIF TensorBoard shows, when the run logs to TensorBoard), a
few hundred kilobytes where the episode's raw frames are hundreds of megabytes (500
CartPole frames of 400x600x3). The driver only writes the bytes into ``run_dir/videos``
and hands them to its logger.

Example:
    >>> import functools
    >>> from tdscheme.envs import make_env
    >>> from tdscheme.presets.actor_critic import actor_critic_modules
    >>> actor = actor_critic_modules("CartPole-v1", hidden_sizes=(8,))["actor"]
    >>> factory = functools.partial(make_env, "CartPole-v1", render_mode="rgb_array")
    >>> with ClipMaker(VideoSettings(factory, max_frames=20)) as maker:
    ...     clip = maker.make(actor, seed=0)
    >>> clip.mp4[4:8], clip.num_frames <= 20, (clip.height, clip.width)
    (b'ftyp', True, (400, 600))
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tensordict import TensorDictBase
from torch import nn

from tdscheme.engine.logger_backends import gif_bytes
from tdscheme.engine.video import EpisodeRecorder

__all__ = ["BackgroundVideos", "ClipMaker", "VideoClip", "VideoSettings"]

logger = logging.getLogger(__name__)

#: The nice value a video thread of lower priority takes where ``SCHED_IDLE`` is refused.
VIDEO_NICENESS = 10


@dataclasses.dataclass(frozen=True)
class VideoSettings:
    """How the videos of a run are recorded; small, so an eval worker is built from it.

    Attributes:
        env_factory: builds the rendering env (see :func:`tdscheme.engine.video.render_frame`).
        max_frames: the most frames one video records.
        gif: also encode the animated GIF that TensorBoard shows.
    """

    env_factory: Callable[[], Any]
    max_frames: int = 1000
    gif: bool = False


@dataclasses.dataclass(frozen=True)
class VideoClip:
    """One recorded episode, encoded.

    Attributes:
        mp4: the H.264 mp4 file's bytes.
        fps: frames per second that play it in real time.
        num_frames: frames recorded (the reset's included).
        height, width: the frame size.
        episode_return: the sum of the recorded steps' rewards.
        complete: whether the episode ended before the frame cap.
        gif: the animated GIF TensorBoard shows (``VideoSettings.gif``), else ``None``.
        path: where the driver wrote the mp4, once it has.
    """

    mp4: bytes
    fps: float
    num_frames: int
    height: int
    width: int
    episode_return: float
    complete: bool
    gif: bytes | None = None
    path: Path | None = None


class ClipMaker:
    """A rendering env of its own that records episodes of a policy as :class:`VideoClip` s.

    The env is built, reset and rendered once here, so an env that cannot render fails
    at once (an ``ImportError`` naming the ``video`` extra, or a ``RuntimeError`` saying
    how to build one that renders: :class:`~tdscheme.engine.video.EpisodeRecorder`'s).

    Args:
        settings: the env factory, the frame cap and whether to encode a GIF.
    """

    def __init__(self, settings: VideoSettings) -> None:
        self.settings = settings
        self._folder = tempfile.TemporaryDirectory(prefix="tdscheme-clip-")
        try:
            self._recorder = EpisodeRecorder(
                settings.env_factory, self._folder.name, max_frames=settings.max_frames
            )
        except BaseException:
            self._folder.cleanup()
            raise

    def make(self, policy: nn.Module, *, seed: int | None, deterministic: bool = True) -> VideoClip:
        """Records one episode of ``policy`` on ``seed`` (``None``: the env goes on as it is)."""
        recording = self._recorder.record(
            policy, name="clip", seed=seed, deterministic=deterministic
        )
        try:
            mp4 = recording.path.read_bytes()
        finally:
            recording.path.unlink(missing_ok=True)
        frames = recording.frames
        return VideoClip(
            mp4=mp4, fps=recording.fps, num_frames=len(frames), height=frames.shape[1],
            width=frames.shape[2], episode_return=recording.episode_return,
            complete=recording.complete,
            gif=gif_bytes(frames, recording.fps) if self.settings.gif else None,
        )  # fmt: skip

    def close(self) -> None:
        """Closes the env and removes the scratch folder. Idempotent."""
        self._recorder.close()
        self._folder.cleanup()

    def __enter__(self) -> ClipMaker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@dataclasses.dataclass
class _Job:
    weights: TensorDictBase
    frames: int
    seed: int | None


def _lower_this_threads_priority() -> None:
    """The calling thread (Linux: scheduling attributes are a thread's) at the lowest priority.

    Linux's ``SCHED_IDLE`` policy: the thread runs when nothing else wants the CPU (with
    a nice value of 10 instead, videos cost training about a third of its frames/s in
    one measurement on 2 loaded cores: ``benchmarks/fault_rows/evaluation.py``); where
    it is refused, a nice value of :data:`VIDEO_NICENESS`.
    """
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        with contextlib.suppress(OSError):
            os.nice(VIDEO_NICENESS)


class BackgroundVideos:
    """Records videos in a thread of the driver: :meth:`submit` returns at once.

    The thread builds its own :class:`ClipMaker` (a renderer belongs to the thread that
    made it: MuJoCo's GL context does) and keeps its own copy of the policy, into which
    each job's weights are loaded. One video is recorded at a time; when one is
    submitted while another waits, the newer weights replace the waiting ones
    (``skipped`` counts them), so jobs never pile up behind a slow renderer.

    With ``lower_priority`` (an eval worker's: its replies never wait for a video) the
    thread runs at the lowest CPU priority (Linux, where it is a thread's own, and the
    ffmpeg it starts inherits it): a video is the least urgent work of a
    run. Not in the driver: its training thread shares the GIL with this one, and a
    thread holding the GIL with little CPU would stall training.

    Args:
        settings: what the :class:`ClipMaker` is built from.
        policy: the policy module (copied once).
        deterministic: act with the mode of the policy's distribution.
        start_timeout_s: the longest wait for the thread's env to be built.
        lower_priority: the thread runs at the lowest CPU priority (Linux only; see above).

    Raises:
        ImportError, RuntimeError: the env cannot render (as :class:`ClipMaker`).
        TimeoutError: the env was not built within ``start_timeout_s``.
    """

    def __init__(
        self,
        settings: VideoSettings,
        policy: nn.Module,
        *,
        deterministic: bool = True,
        start_timeout_s: float = 120.0,
        lower_priority: bool = False,
    ) -> None:
        self._policy = copy.deepcopy(policy)
        self._lower_priority = lower_priority
        self._deterministic = deterministic
        self._cond = threading.Condition()
        self._queued: _Job | None = None
        self._busy = False
        self._done: list[tuple[int, VideoClip]] = []
        self._error: BaseException | None = None
        self._ready = False
        self._closed = False
        self.skipped = 0
        self._thread = threading.Thread(
            target=self._run, args=(settings,), name="tdscheme-videos", daemon=True
        )
        self._thread.start()
        with self._cond:
            if not self._cond.wait_for(lambda: self._ready or self._error, start_timeout_s):
                self.close()
                raise TimeoutError(f"the video env was not built in {start_timeout_s:g} s")
        if self._error is not None:
            self._thread.join(timeout=10.0)
            raise self._error

    def submit(self, weights: TensorDictBase, *, frames: int, seed: int | None) -> None:
        """Queues a video of ``weights`` (trained on ``frames`` frames) on ``seed``; returns at once."""
        with self._cond:
            if self._queued is not None:
                self.skipped += 1
                logger.info("video at %d frames skipped: newer weights replace it", frames)
            self._queued = _Job(weights, frames, seed)
            self._cond.notify_all()

    def poll(self) -> list[tuple[int, VideoClip]]:
        """The videos finished since the last call: ``(frames, clip)``, oldest first.

        Raises:
            RuntimeError: recording failed in the thread (its error is the cause).
        """
        with self._cond:
            if self._error is not None:
                raise RuntimeError(f"recording a video failed: {self._error}") from self._error
            done, self._done = self._done, []
        return done

    def drain(self, timeout_s: float) -> list[tuple[int, VideoClip]]:
        """Waits (at most ``timeout_s``) for the videos queued or being recorded; returns :meth:`poll`'s.

        Raises:
            TimeoutError: some were still being recorded.
        """
        deadline = time.monotonic() + timeout_s
        with self._cond:
            idle = self._cond.wait_for(
                lambda: self._error or not (self._busy or self._queued),
                max(0.0, deadline - time.monotonic()),
            )  # fmt: skip
        if not idle:
            raise TimeoutError(f"a video was still being recorded after {timeout_s:g} s")
        return self.poll()

    def close(self, timeout_s: float = 30.0) -> None:
        """Stops the thread (after the video it records) and closes its env. Idempotent."""
        with self._cond:
            self._closed = True
            self._queued = None
            self._cond.notify_all()
        self._thread.join(timeout=timeout_s)
        if self._thread.is_alive():
            logger.warning("the video thread is still recording after %g s; left behind", timeout_s)

    def _run(self, settings: VideoSettings) -> None:
        if self._lower_priority and sys.platform.startswith("linux"):  # elsewhere: the process
            _lower_this_threads_priority()
        try:
            maker = ClipMaker(settings)
        except BaseException as err:  # noqa: BLE001 - handed to the constructor
            with self._cond:
                self._error = err
                self._cond.notify_all()
            return
        try:
            with self._cond:
                self._ready = True
                self._cond.notify_all()
            while True:
                with self._cond:
                    self._cond.wait_for(lambda: self._closed or self._queued is not None)
                    if self._closed:
                        return
                    job, self._queued, self._busy = self._queued, None, True
                try:
                    job.weights.to_module(self._policy)
                    clip = maker.make(
                        self._policy, seed=job.seed, deterministic=self._deterministic
                    )
                except BaseException as err:  # noqa: BLE001 - raised by the next poll()
                    with self._cond:
                        self._error, self._busy = err, False
                        self._cond.notify_all()
                    return
                with self._cond:
                    self._done.append((job.frames, clip))
                    self._busy = False
                    self._cond.notify_all()
        finally:
            maker.close()

    def __enter__(self) -> BackgroundVideos:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
