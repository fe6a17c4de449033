"""Trainer: runs a Scheme for a frame budget with logging, evaluation, checkpoints and resume."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from tdscheme.engine.atomic import atomic_write, write_text_atomic
from tdscheme.engine.checkpoint import CheckpointManager
from tdscheme.engine.curriculum import CurriculumRunner
from tdscheme.engine.evaluation import EvalResult
from tdscheme.engine.evaluations import Evaluations
from tdscheme.engine.extras import missing_logger_package, missing_video_packages
from tdscheme.engine.progress import Progress
from tdscheme.engine.replay_checkpoint import (
    load_replay_buffer,
    prune_replay_buffers,
    save_replay_buffer,
)
from tdscheme.engine.run_log import RunLogger
from tdscheme.engine.seeding import rng_state, seed_everything, set_rng_state, worker_seeds
from tdscheme.engine.trainer_config import CONFIG_FILE, TrainerConfig
from tdscheme.engine.video_clips import VideoClip, VideoSettings
from tdscheme.runtime import interrupts
from tdscheme.scheme import Scheme

__all__ = ["CONFIG_FILE", "Trainer", "TrainerConfig"]

logger = logging.getLogger(__name__)

CHECKPOINT_DIR = "checkpoints"


class Trainer:
    """Runs a :class:`~tdscheme.Scheme` for ``total_frames`` frames.

    Every iteration's metrics are logged at ``step = frames`` (through a
    :class:`~tdscheme.engine.run_log.RunLogger`) and shown on a
    :class:`~tdscheme.engine.progress.Progress`. Evaluations run the deterministic
    policy on separate eval envs (``scheme.eval_env_factory``, or the training env
    factory when there is none) and log ``eval/return``, ``eval/return_std``,
    ``eval/episode_length``. Checkpoints hold the scheme (learner, optimizer,
    counters, collector state; off-policy: target networks, updater and exploration
    state, and with ``checkpoint_replay_buffer`` the replay buffer in a directory beside
    the file), the trainer's counters, the seed and the RNG states;
    with ``resume=True`` the run continues from its newest checkpoint at the same
    frame count, and rows logged after that checkpoint are dropped before new ones
    are appended.

    Seeding: the scheme's ``config.seed`` seeds this process (``random``, numpy,
    torch) once the scheme is built; workers get distinct seeds from the
    collector; a resumed run reseeds them with fresh ones.

    Args:
        scheme: a Scheme, or a function building one (the Trainer owns it either way
            and shuts it down in :meth:`close`).
        config: ``TrainerConfig()`` when ``None``.
        run_config: the run's configuration (JSON-compatible), written to
            ``run_dir/config.json``, logged as hyperparameters and kept in checkpoints.
        video_env_factory: builds the rendering env ``config.video`` records (a preset's
            ``video_env_factory()``); ``None``: the eval env factory (its env must render).
        curriculum: ``curriculum(episodes) -> env config or None``, called after every
            step with the recent episodes; a config is pushed to the workers, versioned, and
            its state checkpointed (:mod:`tdscheme.engine.curriculum`, ``ThresholdCurriculum``).

    Raises:
        TypeError: ``scheme`` is neither a Scheme nor a function returning one.
        FileNotFoundError: ``resume=True`` and ``run_dir`` has no checkpoint.
        tdscheme.errors.CheckpointError: ``resume=True`` and every checkpoint is damaged.

    Example:
        >>> # Needs Ray; see tdscheme.presets and the `tdscheme train` command
        >>> from tdscheme.presets import get_preset  # doctest: +SKIP
        >>> preset = get_preset("ppo-cartpole")  # doctest: +SKIP
        >>> with Trainer(preset.build_scheme, config=TrainerConfig(
        ...         total_frames=50_000, run_dir="runs/demo", eval_every_frames=10_000)) as trainer:
        ...     summary = trainer.run()  # doctest: +SKIP
    """

    def __init__(
        self,
        scheme: Scheme | Callable[[], Scheme],
        *,
        config: TrainerConfig | None = None,
        run_config: Mapping[str, Any] | None = None,
        video_env_factory: Callable[[], Any] | None = None,
        curriculum: Callable[..., Any] | None = None,
    ) -> None:
        self._started = time.perf_counter()
        self.config = TrainerConfig() if config is None else config
        if not isinstance(self.config, TrainerConfig):
            raise TypeError(f"config must be a TrainerConfig or None, got {self.config!r}")
        self.run_config = dict(run_config or {})
        self.run_dir = None if self.config.run_dir is None else Path(self.config.run_dir)
        self._closed = False
        self._run_log: RunLogger | None = None
        self._evals: Evaluations | None = None
        self._video_env_factory = video_env_factory
        self._curriculum = CurriculumRunner(curriculum)
        self.scheme: Scheme | None = None
        self._counters: dict[str, Any] = {
            "elapsed_s": 0.0, "last_eval_frames": -1, "last_checkpoint_frames": -1,
            "evaluations": 0, "resumes": 0, "eval_return": None, "eval_return_std": None,
            "target_frames": None, "target_elapsed_s": None,
        }  # fmt: skip
        self.checkpoints = None
        self._threads_before = torch.get_num_threads()
        if self.config.num_threads is not None:
            torch.set_num_threads(self.config.num_threads)
        try:
            self._setup(scheme)
        except BaseException:
            self.close()
            raise

    def _setup(self, scheme: Scheme | Callable[[], Scheme]) -> None:
        cfg = self.config
        # the logger's and the video extra's packages, before the scheme starts Ray
        for missing in (missing_logger_package(cfg.logger), cfg.video and missing_video_packages()):
            if missing:
                raise missing
        resume_state = None
        if self.run_dir is not None:
            self.checkpoints = CheckpointManager(
                self.run_dir / CHECKPOINT_DIR, keep_last=cfg.keep_checkpoints
            )
            if cfg.resume:
                resume_state = self.checkpoints.load()
        if isinstance(scheme, Scheme):
            self.scheme = scheme
        elif callable(scheme):
            self.scheme = scheme()
            if not isinstance(self.scheme, Scheme):
                raise TypeError(f"scheme() must return a Scheme, got {type(self.scheme).__name__}")
        else:
            raise TypeError(
                f"scheme={scheme!r} is invalid; accepted: a Scheme or a function returning one"
            )
        videos = None
        if cfg.video:  # its env is built now: one that cannot render fails before training
            env_factory = self._video_env_factory or self.scheme.eval_env_factory
            videos = VideoSettings(
                env_factory or self.scheme.env_factory, max_frames=cfg.video_max_frames,
                gif=cfg.logger == "tensorboard",
            )  # fmt: skip
        self._evals = Evaluations(
            cfg, self.scheme, self._counters, log=self._log_at, elapsed_s=lambda: self.elapsed_s,
            videos=videos, on_video=self._write_video,
        )  # fmt: skip
        if resume_state is not None:
            self._restore(resume_state)
        elif self.seed is not None:
            seed_everything(self.seed)
        self._curriculum.start(self.scheme, resume_state)  # after the scheme's own state
        if self.run_dir is not None:
            self._run_log = RunLogger(
                self.run_dir, backend=cfg.logger, exp_name=cfg.exp_name,
                resume_from_step=self.frames if resume_state is not None else None,
            )  # fmt: skip
            if self.run_config:
                _write_json(self.run_dir / CONFIG_FILE, self.run_config)
                if resume_state is None:
                    self._run_log.log_hparams(self.run_config)

    def _write_video(self, clip: VideoClip, frames: int) -> None:
        """Writes a video into ``run_dir/videos/eval_<frames>.mp4`` and hands it to the logger."""
        path = self.run_dir / "videos" / f"eval_{frames}.mp4"
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(path, binary=True) as f:
            f.write(clip.mp4)
        self._run_log.log_video("eval/video", dataclasses.replace(clip, path=path), step=frames)

    # -- counters ----------------------------------------------------------------------

    @property
    def seed(self) -> int | None:
        """The run's seed (the scheme's ``config.seed``)."""
        return self.scheme.config.seed

    @property
    def frames(self) -> int:
        """Frames trained on so far (restored on resume)."""
        return self.scheme.frames

    @property
    def elapsed_s(self) -> float:
        """Wall time of the run so far, summed over resumed sessions."""
        return self._counters["elapsed_s"] + time.perf_counter() - self._started

    # -- the loop ----------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        """Trains until ``total_frames`` (or ``target_return``), then evaluates and checkpoints.

        Returns:
            The summary: ``frames``, ``iterations``, ``elapsed_s``, ``eval_return``,
            ``eval_return_std``, ``target_return``, ``target_reached``,
            ``target_frames``, ``target_elapsed_s``, ``checkpoint``, ``run_dir`` and
            ``interrupted`` (``"SIGINT"`` or ``"SIGTERM"`` when the ``tdscheme``
            command's handlers (:mod:`tdscheme.runtime.interrupts`) asked the run to
            stop: it stopped between two steps, skipped the final evaluation and
            wrote a final checkpoint; else ``None``).

        Raises:
            RuntimeError: the trainer is closed.
        """
        self._check_open()
        cfg = self.config
        progress = Progress(
            cfg.total_frames, enabled=cfg.progress, every_s=cfg.progress_every_s,
            initial_frames=min(self.frames, cfg.total_frames),
        )  # fmt: skip
        self.scheme.set_total_frames(cfg.total_frames)  # the last batch is cut to fit
        try:
            while (
                self.frames < cfg.total_frames
                and self.scheme.frames_left != 0
                and not self.target_reached
            ):
                if interrupts.stop_requested():
                    break
                step_started = time.monotonic()
                before = self.frames
                try:
                    metrics = self.scheme.step()
                except StopIteration:  # the budget's rest held no whole env step: spent
                    break
                metrics.update(self._curriculum.step(self.scheme))
                metrics["time/elapsed_s"] = self.elapsed_s
                self._log(metrics)
                postfix = {}  # a step where no episode ended keeps the last return shown
                if "train/episode_return" in metrics:
                    postfix["return"] = metrics["train/episode_return"]
                if "curriculum/level" in metrics:  # a curriculum's level, where it has one
                    postfix["level"] = int(metrics["curriculum/level"])
                # eval workers' results (logged at their weights' frames), or an inline one
                evaluated = self._evals.collect()
                if self._evals.due(self.frames):
                    evaluated = self._evals.start(self.frames) or evaluated
                if evaluated is not None:
                    postfix["eval"] = evaluated
                progress.update(
                    max(0, min(self.frames, cfg.total_frames) - max(before, 0)), **postfix
                )
                if _due(
                    self.frames,
                    self._counters["last_checkpoint_frames"],
                    cfg.checkpoint_every_frames,
                ):
                    self.save_checkpoint()
                interrupts.note_step(time.monotonic() - step_started)  # the stop's grace period
            stopped = interrupts.stop_requested()
            if stopped:
                logger.warning("%s: stopped at %d frames", stopped, self.frames)
            else:  # the final evaluation, and the eval workers' results still in flight
                self._evals.finish(self.frames, final=cfg.eval_at_end, timeout_s=cfg.eval_timeout_s)
            if (
                (cfg.checkpoint_at_end or stopped)
                and self.checkpoints is not None
                and self._counters["last_checkpoint_frames"] != self.frames
            ):
                self.save_checkpoint()
        finally:
            progress.close()
        if self._run_log is not None:
            self._run_log.flush()
        return self.summary()

    @property
    def target_reached(self) -> bool:
        """Whether an evaluation reached ``target_return``."""
        return self._counters["target_frames"] is not None

    def summary(self) -> dict[str, Any]:
        """The run's counters and latest evaluation (see :meth:`run`)."""
        c = self._counters
        latest = self.checkpoints.latest() if self.checkpoints is not None else None
        return {
            "frames": self.frames,
            "iterations": self.scheme.iterations,
            "elapsed_s": self.elapsed_s,
            "eval_return": c["eval_return"],
            "eval_return_std": c["eval_return_std"],
            "target_return": self.config.target_return,
            "target_reached": self.target_reached,
            "target_frames": c["target_frames"],
            "target_elapsed_s": c["target_elapsed_s"],
            "checkpoint": None if latest is None else str(latest),
            "run_dir": None if self.run_dir is None else str(self.run_dir),
            "interrupted": interrupts.stop_requested(),
        }

    def _log(self, metrics: Mapping[str, float]) -> None:
        self._log_at(metrics, self.frames)

    def _log_at(self, metrics: Mapping[str, float], frames: int) -> None:
        if self._run_log is not None:
            self._run_log.log_scalars(metrics, step=frames)

    # -- evaluation --------------------------------------------------------------------

    def evaluate(self, episodes: int | None = None) -> EvalResult:
        """Runs the deterministic policy on the eval env for ``episodes`` episodes, here and now.

        Args:
            episodes: defaults to ``config.eval_episodes``.

        Returns:
            The episodes' returns and lengths.
        """
        self._check_open()
        return self._evals.evaluate(episodes)

    # -- checkpoints -------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint holds: scheme, trainer counters, seed, RNG states, run config."""
        counters = dict(self._counters, elapsed_s=self.elapsed_s)
        return {
            "scheme": self.scheme.state_dict(),
            "trainer": counters,
            "seed": self.seed,
            "rng": rng_state(),
            "config": self.run_config,
            "curriculum": self._curriculum.state_dict(),
        }

    def save_checkpoint(self) -> Path:
        """Writes a checkpoint of the run now (atomically) and returns its path.

        Raises:
            RuntimeError: the trainer has no ``run_dir``, or is closed.
        """
        self._check_open()
        if self.checkpoints is None:
            raise RuntimeError("save_checkpoint needs TrainerConfig.run_dir; it is None")
        self._counters["last_checkpoint_frames"] = self.frames
        directory = self.checkpoints.directory
        with self.scheme.paused():  # a Ray-held buffer's writes wait: state and buffer agree
            state = self.state_dict()
            state["replay_buffer"] = save_replay_buffer(self.scheme, directory, self.frames)
        path = self.checkpoints.save(state, self.frames)
        prune_replay_buffers(directory)
        logger.info("checkpoint %s", path)
        return path

    def _restore(self, state: Mapping[str, Any]) -> None:
        self.scheme.load_state_dict(state["scheme"])
        load_replay_buffer(self.scheme, self.checkpoints.directory, state.get("replay_buffer"))
        counters = dict(state["trainer"])
        counters["resumes"] = int(counters.get("resumes", 0)) + 1
        self._counters.update(counters)
        set_rng_state(state["rng"])
        if self.seed is not None:  # fresh env streams, not a replay of the first session's
            resumes = self._counters["resumes"]
            self.scheme.set_seed(worker_seeds(self.seed, resumes + 1)[resumes])
        logger.info("resumed %s at %d frames", self.run_dir, self.frames)

    # -- lifetime ----------------------------------------------------------------------

    def close(self) -> None:
        """Closes the logs, the eval env and eval workers, and shuts the scheme down. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._run_log is not None:
                self._run_log.close()
            if self._evals is not None:
                self._evals.close()
        finally:
            torch.set_num_threads(self._threads_before)
            if self.scheme is not None:
                self.scheme.shutdown()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("Trainer is closed")

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Trainer(frames={self.scheme.frames if self.scheme else 0}, config={self.config})"


def _due(frames: int, last: int, every: int) -> bool:
    return every > 0 and frames - max(last, 0) >= every


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
