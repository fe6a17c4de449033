"""The ``tdscheme`` command's ``train``, ``bench``, ``eval`` and ``plot`` commands.

:mod:`tdscheme.cli.main` is the entry point: it parses the command line and makes
the preset (:mod:`tdscheme.cli.parser`, no torch) before it imports this module
(torch, torchrl) while it starts Ray. See :mod:`tdscheme.cli.main` for the usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from tdscheme.cli.options import setting_error
from tdscheme.cli.parser import train_overrides
from tdscheme.engine import CheckpointManager
from tdscheme.engine.checkpoint import load_checkpoint
from tdscheme.engine.checkpoint_eval import evaluate_checkpoints, write_scores
from tdscheme.engine.extras import missing_plot_package, missing_video_packages
from tdscheme.engine.plot import (
    has_lag_histogram,
    plot_checkpoint_scores,
    plot_learning_curve,
    plot_policy_lag,
    plot_throughput,
)
from tdscheme.engine.run_log import read_metrics
from tdscheme.engine.trainer_config import CONFIG_FILE, TrainerConfig
from tdscheme.envs.ids import missing_env_packages
from tdscheme.errors import (
    CheckpointError,
    NonFiniteInputError,
    NonFiniteUpdateError,
    PlacementError,
    ReplayBufferDied,
    WorkerError,
)
from tdscheme.presets import Preset, preset_from_dict
from tdscheme.runtime import RayLease, interrupts

__all__ = ["RUN_FAILURES", "run"]

#: The errors a run ends with when it fails for a reason of its own (a worker past
#: ``max_restarts``, the replay buffer's actor, NaN updates, a bounded wait): the
#: command prints them with the run's state and exits 1 (other errors are bugs:
#: their traceback is printed).
RUN_FAILURES: tuple[type[BaseException], ...] = (
    WorkerError, ReplayBufferDied, NonFiniteUpdateError, NonFiniteInputError, TimeoutError,
)  # fmt: skip


def run(
    args: argparse.Namespace,
    preset: Preset | None,
    started: float,
    ray_lease: RayLease | None = None,
) -> int:
    """Runs a parsed command; returns the exit status.

    Args:
        args: ``tdscheme.cli.parser.build_parser().parse_args(...)``.
        preset: for ``train``, the preset :func:`tdscheme.cli.parser.train_preset`
            made from ``args``; ``None`` for the other commands.
        started: ``time.time()`` when the command started (a fallback for the
            process start time in the summary).
        ray_lease: a lease on the Ray the entry point started for ``train``;
            released here if the preset's ``ray_init_config`` differs from its config.

    Returns:
        0 on success, 1 on a runtime error; usage errors exit with status 2 (argparse).
    """
    try:
        if args.command == "train":
            assert preset is not None, "train needs its preset"
            return _train(args, preset, started, ray_lease)
        if args.command == "bench":
            assert preset is not None, "bench needs its preset"
            return _bench(args, preset, ray_lease)
        return {"eval": _eval, "plot": _plot}[args.command](args)
    except (CheckpointError, FileNotFoundError, PlacementError, ImportError) as err:
        print(f"tdscheme {args.command}: error: {err}", file=sys.stderr)
        return 1


# -- train ------------------------------------------------------------------------------


def _train(
    args: argparse.Namespace, preset: Preset, started: float, ray_lease: RayLease | None
) -> int:
    if ray_lease is not None and ray_lease.config != preset.scheme.ray_init_config:
        ray_lease.release()  # the run starts or joins the Ray it asks for instead
    run_dir = None if preset.trainer.run_dir is None else Path(preset.trainer.run_dir)
    where = "no run directory (nothing written)" if run_dir is None else f"run directory {run_dir}"
    print(f"tdscheme train {preset.name}: {where}", flush=True)
    failed: str | None = None
    setup_s = time.time() - _process_start(started)
    if interrupts.stop_requested():  # before any actor starts: nothing to save
        raise KeyboardInterrupt(interrupts.stop_requested())
    try:
        trainer = preset.build_trainer()
    except (NotImplementedError, ValueError) as err:  # settings that do not go together
        args.command_parser.error(setting_error(err, train_overrides(args)))
    with trainer:  # shuts the workers down before the failure's lines are printed
        try:
            summary = trainer.run()
        except RUN_FAILURES as err:
            failed = _failed_lines(err, trainer, run_dir, verbose=args.verbose)
    if failed is not None:
        print(failed, file=sys.stderr, flush=True)
        return 1
    if summary["interrupted"]:
        if ray_lease is not None:
            ray_lease.release()  # the run's own leases went with the trainer
        print(_stopped_line(summary), file=sys.stderr, flush=True)
        return interrupts.exit_status() or 130
    _print_summary(
        summary, setup_s, resumed=preset.trainer.resume, trainer=preset.trainer,
        learners=preset.scheme.num_learners,
    )  # fmt: skip
    return 0


def _bench(args: argparse.Namespace, preset: Preset, ray_lease: RayLease | None) -> int:
    from tdscheme.cli.bench import bench, bench_lines

    own = None if ray_lease is not None else RayLease.acquire(preset.scheme.ray_init_config)
    try:  # the entry point's lease is released by the entry point
        for line in bench_lines(bench(preset, seconds=args.seconds)):
            print(line, flush=True)
    finally:
        if own is not None:
            own.release()
    return 0


def _failed_lines(err: BaseException, trainer: Any, run_dir: Path | None, *, verbose: bool) -> str:
    """What a run that failed (a worker, the replay buffer, NaN) ends with, in place of a traceback.

    The error's own text (a worker's has its id and remote traceback), the frames
    trained on, the last checkpoint and how to resume; ``--verbose`` adds where the
    driver raised it.
    """
    where = "".join(traceback.format_exception(err)) if verbose else ""
    latest = trainer.checkpoints.latest() if trainer.checkpoints is not None else None
    resume = (
        f"last checkpoint {latest} (resume with: tdscheme train --resume {run_dir})"
        if latest is not None
        else "no checkpoint yet"
    )
    return (
        f"{where}tdscheme train: error: {type(err).__name__}: {err}\n"
        f"tdscheme train: the run stopped at {trainer.frames} frames; workers shut down; "
        f"{resume}" + ("" if verbose else " (-v shows where it was raised)")
    )


def _stopped_line(summary: dict[str, Any]) -> str:
    """The one line an interrupted run ends with."""
    import ray

    checkpoint = summary["checkpoint"] or "none (no run directory)"
    ray_state = "the Ray it joined left running" if ray.is_initialized() else "Ray shut down"
    resume = (
        "" if summary["run_dir"] is None
        else f" (resume with: tdscheme train --resume {summary['run_dir']})"
    )  # fmt: skip
    return (
        f"tdscheme train: {summary['interrupted']}: stopped cleanly at {summary['frames']} "
        f"frames; final checkpoint {checkpoint}; workers shut down, {ray_state}{resume}"
    )


def _process_start(fallback: float) -> float:
    try:
        import psutil

        return psutil.Process().create_time()
    except Exception:  # psutil missing or the platform hides it: time since main() instead
        return fallback


def _print_summary(
    summary: dict[str, Any], setup_s: float, *, resumed: bool, trainer: TrainerConfig,
    learners: int = 0,
) -> None:
    line = f"done: {summary['frames']} frames in {summary['elapsed_s']:.1f} s"
    if learners > 1:
        line += f", trained on {learners} learner ranks"
    if summary["eval_return"] is not None:
        line += f"; eval return {summary['eval_return']:.1f} +/- {summary['eval_return_std']:.1f}"
    print(line)
    if summary["target_return"] is not None:
        if summary["target_reached"]:
            since_start = (
                ""
                if resumed
                else f", {setup_s + summary['target_elapsed_s']:.1f} s since the command started"
            )
            print(
                f"target return {summary['target_return']:g} reached at {summary['target_frames']} "
                f"frames, {summary['target_elapsed_s']:.1f} s of training{since_start}"
            )
        else:
            print(f"target return {summary['target_return']:g} not reached")
    if summary["checkpoint"]:
        print(f"checkpoint: {summary['checkpoint']}")
    run_dir = summary["run_dir"]
    if run_dir is None:
        print("summary: " + json.dumps(summary), flush=True)
        return
    print(f"logs: {run_dir}/metrics.csv (plot with: tdscheme plot {run_dir})")
    if trainer.logger == "wandb" and os.environ.get("WANDB_MODE", "offline") == "offline":
        print(
            f"W&B offline run in {run_dir}/wandb (upload: wandb sync {run_dir}/wandb/offline-run-*)"
        )
    elif trainer.logger == "tensorboard":  # torchrl's TensorboardLogger, experiment "tdscheme"
        print(f"TensorBoard events in {run_dir}/tdscheme (tensorboard --logdir {run_dir})")
    elif trainer.logger == "mlflow" and not os.environ.get("MLFLOW_TRACKING_URI"):
        print(
            f"MLflow file store {run_dir}/mlruns (mlflow ui --backend-store-uri {run_dir}/mlruns)"
        )
    if trainer.video:
        print(f"videos: {run_dir}/videos")
    print("summary: " + json.dumps(summary), flush=True)


# -- eval and plot ----------------------------------------------------------------------


def _eval(args: argparse.Namespace) -> int:
    paths = _checkpoints_to_evaluate(Path(args.checkpoint), args.pick)
    _check_eval_packages(args, many=len(paths) > 1)
    scores = evaluate_checkpoints(
        paths, preset_from_config=preset_from_dict, episodes=args.episodes, seed=args.seed,
        eval_workers=args.eval_workers, deterministic=not args.stochastic,
    )  # fmt: skip
    for score in scores:
        result = score.result
        print(
            f"at {score.frames} frames ({score.path}): mean return {result.mean_return:.2f}, "
            f"std {result.std_return:.2f} over {len(result.returns)} episodes"
        )
        report = {"checkpoint": str(score.path), "frames": score.frames, **result.metrics("")}
        if args.video:
            report["video"] = _record_video(args, score.path)
        print("eval: " + json.dumps(report))
    run_dir = _run_dir_of(Path(args.checkpoint))
    if len(scores) > 1 and run_dir is not None:  # test mode over the run: a table and a plot
        print(f"wrote {write_scores(run_dir, scores)}")
        print(f"wrote {plot_checkpoint_scores(run_dir)}")
    return 0


def _check_eval_packages(args: argparse.Namespace, *, many: bool) -> None:
    """Raises the ``ImportError`` naming the extra of a package the evaluation needs, before it starts.

    The run's env (from ``RUN_DIR/config.json``), videos (``--video``) and the plot of a
    run's checkpoints.
    """
    run_dir = _run_dir_of(Path(args.checkpoint))
    found = []
    if many and run_dir is not None:
        found.append(missing_plot_package("tdscheme eval of a run (eval_checkpoints.png)"))
    if args.video:
        found.append(missing_video_packages())
    config = None if run_dir is None else run_dir / CONFIG_FILE
    if config is not None and config.is_file():
        algo = preset_from_dict(json.loads(config.read_text(encoding="utf-8"))).algo
        found.append(missing_env_packages(algo.env_id, backend=algo.env_backend))
        if args.video:
            found.append(missing_env_packages(algo.env_id, render=True))
    for err in found:
        if err is not None:
            raise err


def _checkpoints_to_evaluate(path: Path, pick: str | None) -> list[Path]:
    """A file: itself; a run directory: every checkpoint, or the one ``--checkpoint`` picks."""
    if not path.is_dir():
        return [path]
    directory = path / "checkpoints" if (path / "checkpoints").is_dir() else path
    manager = CheckpointManager(directory, keep_last=None)
    if pick is None:
        found = manager.list()
        if not found:
            raise CheckpointError(f"run directory {path} has no checkpoint")
        return found
    if pick == "latest":  # the newest readable one: a damaged newer one is skipped, warned
        return [manager.load_newest()[0]]
    return [directory / pick if not Path(pick).is_absolute() else Path(pick)]


def _run_dir_of(path: Path) -> Path | None:
    if not path.is_dir():
        return None
    return path.parent if path.name == "checkpoints" else path


def _record_video(args: argparse.Namespace, checkpoint: Path) -> str:
    """Records one episode on seed ``--seed`` in the run's ``videos/``; returns the mp4's path."""
    from tdscheme.engine.video import EpisodeRecorder

    state = load_checkpoint(checkpoint)
    preset = preset_from_dict(state["config"])
    learner = preset.learner_factory()(**preset.policy_factory()())
    learner.load_state_dict(state["scheme"]["learner"])
    policy, frames = learner.policy, state["scheme"].get("frames")

    folder = checkpoint.parent
    run_dir = folder.parent if folder.name == "checkpoints" else folder
    with EpisodeRecorder(
        preset.video_env_factory(), run_dir / "videos", max_frames=preset.trainer.video_max_frames
    ) as recorder:
        recording = recorder.record(
            policy, name=f"eval_{frames}_seed{args.seed}", seed=args.seed,
            deterministic=not args.stochastic,
        )  # fmt: skip
    print(
        f"video: {recording.path} ({len(recording.frames)} frames at {recording.fps:g} fps, "
        f"return {recording.episode_return:.2f}{'' if recording.complete else ', cut short'})"
    )
    return str(recording.path)


def _plot(args: argparse.Namespace) -> int:
    try:
        metrics = read_metrics(args.run_dir)  # once: a long run's metrics.csv is large
        out = plot_learning_curve(args.run_dir, args.out, metric=args.metric, metrics=metrics)
    except ValueError as err:
        print(f"tdscheme plot: error: {err}", file=sys.stderr)
        return 1
    print(f"wrote {out}")
    if metrics.get("fps"):
        throughput = plot_throughput(args.run_dir, Path(out).with_name("throughput.png"),
                                     metrics=metrics)  # fmt: skip
        print(f"wrote {throughput}")
    if has_lag_histogram(metrics):  # an asynchronous learner's run: its lag too
        lag = plot_policy_lag(args.run_dir, Path(out).with_name("policy_lag.png"), metrics=metrics)
        print(f"wrote {lag}")
    return 0
