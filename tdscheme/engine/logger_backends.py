"""The torchrl loggers behind a run log: CSV, TensorBoard, Weights & Biases and MLflow.

:func:`make_torchrl_logger` builds one for a run directory; each writes under it,
quietly (the terminal shows tdscheme's progress, not the logger's) and, by default,
with no network:

* ``"csv"``: torchrl's ``CSVLogger``, files in ``run_dir/<exp_name>``.
* ``"tensorboard"``: torchrl's ``TensorboardLogger``, event files in ``run_dir/<exp_name>``.
* ``"wandb"``: torchrl's ``WandbLogger`` (project ``exp_name``, run named after
  ``run_dir``), files in ``run_dir/wandb``. Offline unless ``WANDB_MODE`` is set:
  ``wandb sync run_dir/wandb/offline-run-*`` uploads an offline run later, and
  ``WANDB_MODE=online`` streams to the server (after ``wandb login``). W&B prints
  nothing, leaves the console alone and samples no system metrics.
* ``"mlflow"``: torchrl's ``MLFlowLogger`` (experiment ``exp_name``, run named after
  ``run_dir``) on ``MLFLOW_TRACKING_URI`` when set, else on a file store in
  ``run_dir/mlruns`` (``mlflow ui --backend-store-uri run_dir/mlruns`` shows it).

A resumed run continues its W&B run (the same id, ``resume="allow"``; offline, each
session writes its own ``run_dir/wandb/offline-run-*-<id>`` with that id) and its MLflow
run (the same run id, on the same store): the ids are kept in ``run_dir/logger_run.json``
(:data:`LOGGER_RUN_FILE`). The steps a crashed session logged after its last checkpoint
stay in those services' histories (``metrics.csv`` drops them).
  MLflow 3.10 and later refuse file stores unless ``MLFLOW_ALLOW_FILE_STORE=true``,
  which is then set for this process (when it is unset). MLflow exports the URI it
  logs to as ``MLFLOW_TRACKING_URI``; closing the logger unsets the run directory's
  again, so that the next run in this process gets its own store.

W&B and MLflow come with the ``loggers`` extra (:func:`tdscheme.validation.install_command`);
:func:`missing_package_error` names it without importing anything
(:mod:`tdscheme.engine.extras`), so the ``tdscheme`` command reports a missing package
before it makes a run directory or starts Ray.

:func:`log_video_file` hands a recorded mp4 to the backends that take videos (TensorBoard:
the GIF of :func:`gif_bytes`).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tdscheme.engine.atomic import write_text_atomic
from tdscheme.engine.extras import missing_logger_package

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "LOGGER_RUN_FILE",
    "close_torchrl_logger",
    "gif_bytes",
    "log_video_file",
    "make_torchrl_logger",
    "missing_package_error",
]

logger = logging.getLogger(__name__)

#: The file of a run directory that keeps the W&B / MLflow run it logs to, so that a resumed run
#: continues that run (see :func:`make_torchrl_logger`).
LOGGER_RUN_FILE = "logger_run.json"

#: The most frames of the animated GIF that TensorBoard gets (see :func:`log_video_file`).
GIF_MAX_FRAMES = 200


def missing_package_error(backend: str) -> ImportError | None:
    """The error for a backend whose package is not installed, or ``None``; imports nothing.

    Args:
        backend: ``"csv"``, ``"tensorboard"``, ``"wandb"`` or ``"mlflow"``.

    Returns:
        An ``ImportError`` naming the package and the install command, or ``None``
        (:func:`tdscheme.engine.extras.missing_logger_package`).

    Example:
        >>> missing_package_error("csv") is None
        True
    """
    return missing_logger_package(backend)


def make_torchrl_logger(backend: str, run_dir: Path, exp_name: str) -> Any:
    """Builds the torchrl logger of ``backend`` for ``run_dir`` (see the module).

    W&B and MLflow continue the run whose id ``run_dir``'s :data:`LOGGER_RUN_FILE`
    holds (a resumed run, or any reopening of the run directory): W&B with that id and
    ``resume="allow"``, MLflow with that run id when the store is the one it was made
    in (else a new run, with a warning). The id of the run in use is written there.

    Args:
        backend: ``"csv"``, ``"tensorboard"``, ``"wandb"`` or ``"mlflow"``.
        run_dir: the run's directory (it exists).
        exp_name: the experiment's name.

    Returns:
        A ``torchrl.record.loggers.Logger``.

    Raises:
        ImportError: the backend's package is not installed (naming the extra).
        ValueError: an unknown ``backend``.
    """
    builders = {"csv": _csv, "tensorboard": _tensorboard, "wandb": _wandb, "mlflow": _mlflow}
    if backend not in builders:
        raise ValueError(f"backend={backend!r} is invalid; accepted: {', '.join(builders)}")
    error = missing_package_error(backend)
    if error is not None:
        raise error
    run_dir = Path(run_dir)
    runs = _saved_runs(run_dir)
    torchrl_logger = builders[backend](run_dir, exp_name, runs.get(backend))
    if backend in ("wandb", "mlflow"):
        runs[backend] = _run_record(backend, torchrl_logger)
        write_text_atomic(run_dir / LOGGER_RUN_FILE, json.dumps(runs, indent=2, sort_keys=True))
    return torchrl_logger


def _saved_runs(run_dir: Path) -> dict[str, Any]:
    path = run_dir / LOGGER_RUN_FILE
    if not path.is_file():
        return {}
    try:
        runs = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        logger.warning("ignoring %s (%s): the logger starts a new run", path, err)
        return {}
    return runs if isinstance(runs, dict) else {}


def _run_record(backend: str, torchrl_logger: Any) -> dict[str, str]:
    if backend == "wandb":
        return {"id": torchrl_logger.experiment.id}
    return {"run_id": _mlflow_run_id(torchrl_logger), "tracking_uri": torchrl_logger.log_dir}


def _csv(run_dir: Path, exp_name: str, saved: Any = None) -> Any:
    from torchrl.record.loggers.csv import CSVLogger

    return CSVLogger(exp_name=exp_name, log_dir=str(run_dir))


def _tensorboard(run_dir: Path, exp_name: str, saved: Any = None) -> Any:
    from torchrl.record.loggers.tensorboard import TensorboardLogger

    return TensorboardLogger(exp_name=exp_name, log_dir=str(run_dir))


def _wandb(run_dir: Path, exp_name: str, saved: Any = None) -> Any:
    import wandb
    from torchrl.record.loggers.wandb import WandbLogger

    mode = os.environ.get("WANDB_MODE") or "offline"
    if mode in ("offline", "dryrun", "disabled"):
        # W&B's telemetry reads the process-wide settings, not wandb.init's: offline there too
        wandb.setup(settings=wandb.Settings(mode=mode))
    quiet = wandb.Settings(
        silent=True, console="off", x_disable_stats=True, disable_git=True, save_code=False
    )
    # torchrl's offline=True would set WANDB_MODE for the whole process; mode= is this run's.
    # name= replaces the exp_name torchrl passes as the run's name; id= and resume="allow"
    # (torchrl's default) continue the run this directory logged to before
    run_id = saved.get("id") if isinstance(saved, dict) else None
    return WandbLogger(
        exp_name=exp_name, save_dir=str(run_dir), project=exp_name, log_env_packages=False,
        mode=mode, settings=quiet, name=run_dir.resolve().name, id=run_id, resume="allow",
    )  # fmt: skip


def _mlflow(run_dir: Path, exp_name: str, saved: Any = None) -> Any:
    from mlflow.tracking import MlflowClient
    from torchrl.record.loggers.mlflow import MLFlowLogger

    uri = os.environ.get("MLFLOW_TRACKING_URI") or _file_store_uri(run_dir)
    if uri.startswith("file:"):
        # MLflow >= 3.10 raises on file stores (in "maintenance mode") without this opt-out
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    run_id = _mlflow_run_to_continue(saved, uri)
    if run_id is not None:
        torchrl_logger = _continued_mlflow_logger(MLFlowLogger, run_id)(exp_name, uri)
    else:
        torchrl_logger = MLFlowLogger(exp_name=exp_name, tracking_uri=uri)
    run_id = torchrl_logger.experiment.info.run_id
    MlflowClient(uri).set_tag(run_id, "mlflow.runName", run_dir.resolve().name)
    return torchrl_logger


def _mlflow_run_to_continue(saved: Any, uri: str) -> str | None:
    """The saved MLflow run id, if it is a run of the store at ``uri``; else ``None`` (warned)."""
    if not isinstance(saved, dict) or not saved.get("run_id"):
        return None
    if saved.get("tracking_uri") != uri:
        logger.warning(
            "MLflow run %s was logged to %s, not %s: a new run starts",
            saved["run_id"], saved.get("tracking_uri"), uri,
        )  # fmt: skip
        return None
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    try:
        MlflowClient(uri).get_run(saved["run_id"])
    except MlflowException as err:
        logger.warning("MLflow run %s is not in %s (%s): a new run starts", saved["run_id"], uri,
                       str(err).splitlines()[0])  # fmt: skip
        return None
    return saved["run_id"]


def _continued_mlflow_logger(base: type, run_id: str) -> Any:
    """torchrl's ``MLFlowLogger`` that continues the run ``run_id`` instead of starting one."""

    class ContinuedMLFlowLogger(base):
        def _create_experiment(self) -> Any:
            import mlflow

            self.id = mlflow.get_run(run_id).info.experiment_id
            return mlflow.start_run(run_id=run_id)

    return ContinuedMLFlowLogger


def _file_store_uri(run_dir: Path) -> str:
    return (run_dir / "mlruns").resolve().as_uri()


def close_torchrl_logger(backend: str, torchrl_logger: Any) -> None:
    """Closes a logger of :func:`make_torchrl_logger`: flushes, ends its run, closes its files.

    W&B: the run is finished and, when no other W&B run is open in this process, W&B's
    service is torn down, which waits until the run's files are complete. MLflow: the
    run is ended and the run directory's store leaves ``MLFLOW_TRACKING_URI``.

    Args:
        backend: the backend it was made for.
        torchrl_logger: the logger.
    """
    try:
        torchrl_logger.close()  # W&B: finishes the run; TensorBoard: closes the writer
    finally:
        if backend == "wandb":
            import wandb

            if wandb.run is None:  # no other W&B run in this process (the caller's own)
                # run.finish returns before W&B's service has written the run's last records
                # (a reader of run_dir/wandb right after would miss them): wait for it
                wandb.teardown()
        elif backend == "csv":  # torchrl's CSVExperiment keeps its files open until collected
            files = getattr(torchrl_logger.experiment, "files", None)
            if isinstance(files, dict):
                for f in files.values():
                    f.close()
                files.clear()
        elif backend == "mlflow":  # torchrl started the run with mlflow.start_run, never ends it
            import mlflow

            active = mlflow.active_run()
            if active is not None and active.info.run_id == _mlflow_run_id(torchrl_logger):
                mlflow.end_run()
            uri = torchrl_logger.log_dir
            # mlflow.set_tracking_uri exported the run directory's store to the environment
            if uri.endswith("/mlruns") and os.environ.get("MLFLOW_TRACKING_URI") == uri:
                mlflow.set_tracking_uri(None)  # unsets MLFLOW_TRACKING_URI


def _mlflow_run_id(torchrl_logger: Any) -> str:
    return torchrl_logger.experiment.info.run_id


def log_video_file(
    backend: str,
    torchrl_logger: Any,
    name: str,
    path: Path,
    *,
    gif: bytes | None,
    size: tuple[int, int],
    step: int,
) -> bool:
    """Logs a recorded mp4 where the backend takes videos.

    W&B gets the mp4 itself (``wandb.Video``), MLflow gets it as an artifact under
    ``videos/``, TensorBoard the animated GIF of :func:`gif_bytes` (what torch's
    ``add_video`` writes; torchrl's ``log_video`` needs moviepy 1, which our other pins
    rule out). The CSV logger takes none: the mp4 in the run directory is the record.

    Args:
        backend: the logger's backend.
        torchrl_logger: the logger.
        name: the video's name, e.g. ``"eval/video"``.
        path: the mp4 file.
        gif: the GIF TensorBoard takes (:func:`gif_bytes`; needed for TensorBoard only).
        size: the frames' ``(height, width)``.
        step: the step to log it at (frames trained on).

    Returns:
        Whether the backend took the video.

    Raises:
        ValueError: TensorBoard and no ``gif``.
    """
    if backend == "wandb":
        import wandb

        torchrl_logger.log_metrics({name: wandb.Video(str(path), format="mp4")}, step=step)
    elif backend == "mlflow":
        from mlflow.tracking import MlflowClient

        client = MlflowClient(torchrl_logger.log_dir)
        client.log_artifact(_mlflow_run_id(torchrl_logger), str(path), "videos")
    elif backend == "tensorboard":
        if gif is None:
            raise ValueError("gif=None is invalid with backend='tensorboard'; accepted: GIF bytes")
        from tensorboard.compat.proto.summary_pb2 import Summary

        height, width = size
        image = Summary.Image(height=height, width=width, colorspace=3, encoded_image_string=gif)
        summary = Summary(value=[Summary.Value(tag=name, image=image)])
        torchrl_logger.experiment.file_writer.add_summary(summary, step)
    else:
        return False
    return True


def gif_bytes(frames: np.ndarray, fps: float) -> bytes:
    """The animated GIF TensorBoard shows of ``frames`` (``[T, H, W, 3]`` uint8) at ``fps``.

    Every k-th frame when there are more than :data:`GIF_MAX_FRAMES`, each shown k times
    longer, so it still plays in real time (a GIF is slow to encode and large: 450
    CartPole frames take about 7 s).
    """
    import imageio.v3 as iio

    stride = -(-len(frames) // GIF_MAX_FRAMES)
    return iio.imwrite(
        "<bytes>", frames[::stride], extension=".gif", duration=1000.0 * stride / fps, loop=0
    )
