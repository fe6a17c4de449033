"""TrainerConfig: how a Trainer runs, logs, evaluates and checkpoints."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from typing import Any

from tdscheme.runtime.ray_options import check_actor_options

__all__ = ["BACKENDS", "CONFIG_FILE", "TrainerConfig"]

#: The file in a run directory that holds the run's configuration (``run_config``).
CONFIG_FILE = "config.json"

#: The run log's backends (``TrainerConfig.logger``).
BACKENDS = ("csv", "tensorboard", "wandb", "mlflow")


@dataclasses.dataclass
class TrainerConfig:
    """How a :class:`Trainer` runs, logs, evaluates and checkpoints.

    Args:
        total_frames: stop after training on exactly this many frames: with
            collectors the last batch is cut to fit (its surplus booked as
            discarded in the collector's ledger); with gradient workers the last
            step may pass it by less than one step's frames.
        run_dir: the run's directory (logs, ``config.json``, ``checkpoints/``);
            ``None`` writes nothing (no logs, no checkpoints).
        logger: ``"csv"``, ``"tensorboard"``, ``"wandb"`` (offline unless WANDB_MODE is
            set) or ``"mlflow"`` (a file store in run_dir/mlruns unless MLFLOW_TRACKING_URI
            is set): torchrl's loggers, writing under ``run_dir``; ``metrics.csv`` is
            always written too (``tdscheme plot`` reads it).
        exp_name: the torchrl logger's experiment name (a subdirectory of ``run_dir``;
            W&B's project, MLflow's experiment).
        eval_every_frames: evaluate every this many frames (0: only at the end).
        eval_episodes: episodes per evaluation.
        eval_at_end: evaluate once more when the run ends.
        eval_max_steps: env steps after which one evaluation gives up.
        video: at each evaluation, record one episode of the deterministic policy on a
            rendering copy of the eval env (the evaluation's numbers do not change) as
            ``run_dir/videos/eval_<frames>.mp4``, and send it to the logger where it
            takes videos (W&B, TensorBoard, MLflow); needs ``run_dir`` and the ``video``
            extra. Recorded off the training loop: by the eval worker after its
            evaluation, or (inline evaluation) by a thread of the driver, where newer
            weights replace a video still waiting for it.
        video_max_frames: the most frames one video records (it stops there, mid-episode).
        target_return: stop the run as soon as an evaluation's mean return reaches
            this (``None``: run the whole budget).
        checkpoint_every_frames: checkpoint every this many frames (0: only at the end).
        checkpoint_at_end: checkpoint when the run ends.
        keep_checkpoints: newest checkpoints kept.
        resume: continue the run in ``run_dir`` from its newest readable checkpoint.
        progress: a progress bar (``True``), plain lines (``False``) or a bar only on
            a terminal (``None``).
        progress_every_s: seconds between plain progress lines.
        eval_workers: evaluate on this many Ray actors beside training (AllenAct's
            validation, RLlib's ``evaluation_parallel_to_training``): training never
            waits, each result is logged at the frames of the weights it evaluated and
            ``target_return`` stops the run from it; a due evaluation that finds every
            worker busy waits for the first that frees, and is replaced by newer
            weights if another comes due meanwhile (each one replaced counts in
            ``eval/skipped``). 0: the driver evaluates inline.
        eval_worker_resources: Ray actor options of each eval worker; ``None``:
            ``{"num_cpus": 0}`` (it shares the collectors' CPUs; give it its own on a
            bigger machine).
        eval_timeout_s: an eval worker silent this long is hung (killed and rebuilt);
            also the longest wait for the results in flight when the run ends.
        num_threads: torch's intra-op threads in this process (learner and
            evaluation) while the Trainer is open; 1 is fastest for small networks,
            most of all on a busy machine. ``None`` leaves torch's setting.

    Raises:
        ValueError: a value out of range, naming the field, its value and what is accepted.

    Example:
        >>> TrainerConfig(total_frames=10_000, eval_every_frames=2_000).eval_episodes
        10
        >>> TrainerConfig(logger="neptune")
        Traceback (most recent call last):
        ...
        ValueError: logger='neptune' is invalid; accepted: 'csv', 'tensorboard', 'wandb', 'mlflow'
    """

    total_frames: int = 100_000
    run_dir: str | None = None
    logger: str = "csv"
    exp_name: str = "tdscheme"
    eval_every_frames: int = 0
    eval_episodes: int = 10
    eval_at_end: bool = True
    eval_max_steps: int = 100_000
    target_return: float | None = None
    video: bool = False
    video_max_frames: int = 1000
    checkpoint_every_frames: int = 0
    checkpoint_at_end: bool = True
    keep_checkpoints: int = 3
    resume: bool = False
    progress: bool | None = None
    progress_every_s: float = 10.0
    num_threads: int | None = 1
    eval_workers: int = 0
    eval_worker_resources: Mapping[str, Any] | None = None
    eval_timeout_s: float = 600.0

    def __post_init__(self) -> None:
        for name, minimum in (
            ("total_frames", 1),
            ("eval_every_frames", 0),
            ("eval_episodes", 1),
            ("eval_max_steps", 1),
            ("video_max_frames", 2),
            ("checkpoint_every_frames", 0),
            ("keep_checkpoints", 1),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"{name}={value!r} is invalid; accepted: an int >= {minimum}")
        if self.logger not in BACKENDS:
            raise ValueError(
                f"logger={self.logger!r} is invalid; accepted: {', '.join(map(repr, BACKENDS))}"
            )
        if self.run_dir is not None:
            self.run_dir = os.fspath(self.run_dir)
        tr = self.target_return
        if tr is not None and (
            isinstance(tr, bool) or not isinstance(tr, (int, float)) or not math.isfinite(tr)
        ):
            raise ValueError(f"target_return={tr!r} is invalid; accepted: None or a finite number")
        if not isinstance(self.exp_name, str) or not self.exp_name:
            raise ValueError(f"exp_name={self.exp_name!r} is invalid; accepted: a non-empty str")
        for name in ("eval_at_end", "video", "checkpoint_at_end", "resume"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(
                    f"{name}={getattr(self, name)!r} is invalid; accepted: True or False"
                )
        for name in ("resume", "video"):
            if getattr(self, name) and self.run_dir is None:
                raise ValueError(f"{name}=True is invalid without a run_dir; accepted: set run_dir")
        if self.progress not in (None, True, False):
            raise ValueError(
                f"progress={self.progress!r} is invalid; accepted: True, False or None"
            )
        nt = self.num_threads
        if nt is not None and (isinstance(nt, bool) or not isinstance(nt, int) or nt < 1):
            raise ValueError(f"num_threads={nt!r} is invalid; accepted: None or an int >= 1")
        ew = self.eval_workers
        if isinstance(ew, bool) or not isinstance(ew, int) or ew < 0:
            raise ValueError(f"eval_workers={ew!r} is invalid; accepted: an int >= 0")
        res = self.eval_worker_resources
        if res is not None and not isinstance(res, Mapping):
            raise ValueError(
                f"eval_worker_resources={res!r} is invalid; accepted: None or a dict of Ray options"
            )
        if res is not None:
            check_actor_options("eval_worker_resources", res)
        timeout = self.eval_timeout_s
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ValueError(f"eval_timeout_s={timeout!r} is invalid; accepted: a number > 0")
        every = self.progress_every_s
        if isinstance(every, bool) or not isinstance(every, (int, float)) or not every >= 0:
            raise ValueError(f"progress_every_s={every!r} is invalid; accepted: a number >= 0")
