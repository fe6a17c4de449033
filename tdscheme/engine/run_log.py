"""Scalar logging of a run: a torchrl logger plus one tidy, append-only ``metrics.csv``.

:class:`RunLogger` forwards every scalar to a torchrl logger (``CSVLogger``,
``TensorboardLogger``, ``WandbLogger`` or ``MLFlowLogger``, under ``run_dir``: see
:mod:`tdscheme.engine.logger_backends`) and also appends it to
``run_dir/metrics.csv`` with the columns ``step,name,value``. That file is what
:func:`read_metrics` (and so plots and tests) reads back, whatever the backend.

Resuming: opening a ``RunLogger`` on an existing ``run_dir`` appends to its logs
(torchrl's ``CSVLogger`` opens its files in append mode too). A run that crashed
logged steps after its last checkpoint; pass ``resume_from_step`` (the checkpoint's
step) to drop those rows from ``metrics.csv`` and the CSV backend's files, so the
resumed run does not log the same steps twice. TensorBoard event files are not
rewritten.
"""

from __future__ import annotations

import csv
import dataclasses
import importlib.metadata
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tensordict import TensorDictBase
from torchrl.record.loggers.common import Logger

from tdscheme.engine.logger_backends import (
    close_torchrl_logger,
    gif_bytes,
    log_video_file,
    make_torchrl_logger,
    missing_package_error,
)
from tdscheme.engine.metrics_file import (
    METRICS_FILE,
    open_metrics,
    read_metrics,
    rewrite_rows,
    row_step,
)
from tdscheme.engine.trainer_config import BACKENDS

if TYPE_CHECKING:
    from tdscheme.engine.video import Recording
    from tdscheme.engine.video_clips import VideoClip

__all__ = ["METRICS_FILE", "RunLogger", "read_metrics"]

logger = logging.getLogger(__name__)


class RunLogger:
    """Logs the scalars and hyperparameters of one run; resumable.

    Args:
        run_dir: The run's directory; created if missing.
        backend: ``"csv"`` (torchrl's ``CSVLogger``), ``"tensorboard"`` (torchrl's
            ``TensorboardLogger``, needs the ``tensorboard`` package), ``"wandb"`` or
            ``"mlflow"`` (torchrl's ``WandbLogger`` / ``MLFlowLogger``, the ``loggers``
            extra): see :mod:`tdscheme.engine.logger_backends`.
        exp_name: The torchrl experiment name: CSV and TensorBoard files go to
            ``run_dir/<exp_name>``; W&B's project and MLflow's experiment.
        resume_from_step: When resuming from a checkpoint of this step, rows logged with
            a larger step are dropped first (see the module docstring). ``None`` appends
            to whatever is there.

    Raises:
        ValueError: If ``backend``, ``exp_name`` or ``resume_from_step`` is invalid, or
            ``run_dir/metrics.csv`` exists but is not a tdscheme metrics file.
        ImportError: If the backend's package (tensorboard, wandb, mlflow) is not installed.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as run_dir:
        ...     with RunLogger(run_dir) as run_log:
        ...         run_log.log_scalars({"train/loss": 0.5, "eval/return": 20.0}, step=100)
        ...     read_metrics(run_dir)["eval/return"]
        [(100, 20.0)]
    """

    def __init__(
        self,
        run_dir: str | os.PathLike,
        *,
        backend: str = "csv",
        exp_name: str = "tdscheme",
        resume_from_step: int | None = None,
    ) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {list(BACKENDS)}, got {backend!r}")
        missing = missing_package_error(backend)
        if missing is not None:
            raise missing
        if not isinstance(exp_name, str) or not exp_name or os.sep in exp_name:
            raise ValueError(
                f"exp_name must be a non-empty str without {os.sep!r}, got {exp_name!r}"
            )
        if resume_from_step is not None:
            _check_step(resume_from_step, "resume_from_step")
        self.run_dir = Path(run_dir)
        self.backend = backend
        self.exp_name = exp_name
        self.metrics_path = self.run_dir / METRICS_FILE
        self._closed = False
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if resume_from_step is not None:
            self._drop_rows_after(resume_from_step)
        self._file = open_metrics(self.metrics_path)
        self._writer = csv.writer(self._file, lineterminator="\n")
        try:
            self._torchrl_logger = make_torchrl_logger(backend, self.run_dir, exp_name)
        except BaseException:
            self._file.close()
            raise

    def _drop_rows_after(self, step: int) -> None:
        def keep(row: list[str]) -> bool:
            return row_step(row) <= step

        dropped = rewrite_rows(self.metrics_path, keep, header=True)
        scalars_dir = self.run_dir / self.exp_name / "scalars"
        if self.backend == "csv" and scalars_dir.is_dir():
            for path in scalars_dir.rglob("*.csv"):  # torchrl's files: "step,value" rows
                rewrite_rows(path, keep, header=False)
        if dropped:
            logger.info(
                "resuming %s at step %d: dropped %d logged rows after it",
                self.run_dir,
                step,
                dropped,
            )

    @property
    def torchrl_logger(self) -> Logger:
        """The wrapped torchrl logger, for torchrl tools that take one (e.g. ``VideoRecorder``)."""
        return self._torchrl_logger

    def log_scalars(self, metrics: Mapping[str, Any] | TensorDictBase, step: int) -> None:
        """Logs scalar metrics at ``step``.

        Non-finite values (nan, inf) are logged as they are.

        Args:
            metrics: Names (e.g. ``"train/loss"``) to floats, ints, bools, numpy scalars or
                one-element tensors; a TensorDict's nested keys are joined with ``"/"``.
            step: A non-negative int, usually the frames collected so far.

        Raises:
            TypeError: If a name is not a str or a value is not a number.
            ValueError: If a tensor value has more than one element or ``step`` is invalid.
            RuntimeError: If the logger is closed.
        """
        self._check_open()
        _check_step(step, "step")
        if isinstance(metrics, TensorDictBase):
            metrics = metrics.flatten_keys("/").to_dict()
        rows = {_check_name(name): _to_float(name, value) for name, value in metrics.items()}
        # one call: W&B logs one history row, MLflow one batch (the others loop over log_scalar)
        self._torchrl_logger.log_metrics(rows, step=step)
        self._writer.writerows([step, name, repr(value)] for name, value in rows.items())
        self._file.flush()

    def log_video(self, name: str, video: Recording | VideoClip, *, step: int) -> bool:
        """Logs a recorded mp4 to the backend where it takes videos (W&B, TensorBoard, MLflow).

        Args:
            name: The video's name, e.g. ``"eval/video"``.
            video: A :class:`~tdscheme.engine.video.Recording` written to its ``path``
                (by :class:`~tdscheme.engine.video.EpisodeRecorder`), or a
                :class:`~tdscheme.engine.video_clips.VideoClip` written to its ``path``;
                TensorBoard gets it as an animated GIF (the clip's own, else encoded
                from the recording's frames here).
            step: A non-negative int, usually the frames collected so far.

        Returns:
            Whether the backend took it (the CSV backend takes no video: the mp4 is the record).

        Raises:
            ValueError: If ``step`` is invalid or ``video`` has no ``path``.
            RuntimeError: If the logger is closed.
        """
        self._check_open()
        _check_step(step, "step")
        if video.path is None:
            raise ValueError("video.path is None; accepted: a video written to an mp4")
        frames = getattr(video, "frames", None)  # a Recording's; a clip has its GIF
        gif = getattr(video, "gif", None)
        if gif is None and frames is not None and self.backend == "tensorboard":
            gif = gif_bytes(frames, video.fps)
        size = frames.shape[1:3] if frames is not None else (video.height, video.width)
        return log_video_file(
            self.backend, self._torchrl_logger, _check_name(name), video.path,
            gif=gif, size=tuple(size), step=step,
        )  # fmt: skip

    def log_hparams(self, config: Mapping[str, Any] | Any) -> None:
        """Logs the run's configuration, and ``tdscheme_version``, through the torchrl logger.

        Nested dicts and dataclasses are flattened to ``"outer/inner"`` keys; values
        that are not str, int, float or bool are logged as their ``repr``.

        Args:
            config: A dict or a dataclass instance.

        Raises:
            TypeError: If ``config`` is neither a dict nor a dataclass instance.
            RuntimeError: If the logger is closed.
        """
        self._check_open()
        if not isinstance(config, Mapping) and not _is_dataclass_instance(config):
            raise TypeError(
                f"config must be a dict or a dataclass instance, got {type(config).__name__}"
            )
        flat = {**_flatten_config(config), "tdscheme_version": _version()}
        self._torchrl_logger.log_hparams(flat)

    def flush(self) -> None:
        """Flushes ``metrics.csv`` and the torchrl logger."""
        self._check_open()
        self._file.flush()
        self._torchrl_logger.flush()

    def close(self) -> None:
        """Flushes and closes every file; calling it again does nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            close_torchrl_logger(self.backend, self._torchrl_logger)
        finally:
            self._file.close()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"RunLogger of {self.run_dir} is closed")

    def __enter__(self) -> RunLogger:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"RunLogger({str(self.run_dir)!r}, backend={self.backend!r}, "
            f"exp_name={self.exp_name!r})"
        )


def _check_step(step: Any, argname: str) -> None:
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0:
        raise ValueError(f"{argname} must be a non-negative int, got {step!r}")


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise TypeError(f"metric names must be non-empty strs, got {name!r}")
    return name


def _to_float(name: str, value: Any) -> float:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(
                f"metrics[{name!r}] must be a scalar, got a tensor of shape {tuple(value.shape)}"
            )
        return float(value.detach().cpu().item())
    if isinstance(value, (bool, int, float, np.number, np.bool_)):
        return float(value)
    raise TypeError(
        f"metrics[{name!r}] must be a number (float, int, bool, numpy scalar or one-element "
        f"tensor), got {type(value).__name__}: {value!r}"
    )


def _is_dataclass_instance(obj: Any) -> bool:
    return dataclasses.is_dataclass(obj) and not isinstance(obj, type)


def _flatten_config(config: Any, prefix: str = "") -> dict[str, str | int | float | bool]:
    if _is_dataclass_instance(config):
        config = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    flat: dict[str, str | int | float | bool] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) or _is_dataclass_instance(value):
            flat.update(_flatten_config(value, prefix=f"{name}/"))
        elif isinstance(value, (str, int, float, bool)):
            flat[name] = value
        else:
            flat[name] = repr(value)
    return flat


def _version() -> str:
    """tdscheme's installed version (``tdscheme.__version__``), read without importing the root."""
    try:
        return importlib.metadata.version("tdscheme")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
