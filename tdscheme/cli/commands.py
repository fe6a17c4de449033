"""The ``tdscheme`` command's parser and its ``train``, ``eval`` and ``plot`` commands.

:mod:`tdscheme.cli.main` is the entry point; it imports this module (torch, torchrl)
while it starts Ray for ``train``. See :mod:`tdscheme.cli.main` for the usage.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tdscheme.cli.options import add_setting_options, option_name, setting_error
from tdscheme.engine import CheckpointError, CheckpointManager, evaluate
from tdscheme.engine.checkpoint import load_checkpoint
from tdscheme.engine.plot import plot_learning_curve
from tdscheme.engine.trainer import CONFIG_FILE
from tdscheme.log_levels import configure_driver_logging
from tdscheme.presets import DEFAULT_PRESET, PRESETS, Preset, get_preset, preset_from_dict
from tdscheme.runtime import RayLease

__all__ = ["build_parser", "run"]


def build_parser() -> argparse.ArgumentParser:
    """The ``tdscheme`` argument parser with its ``train``, ``eval`` and ``plot`` commands."""
    parser = argparse.ArgumentParser(
        prog="tdscheme", description="TensorDict-native distributed RL on Ray and torchrl."
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true",
        help="log progress details, and INFO records of Ray, torchrl and the workers",
    )  # fmt: skip
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    train = commands.add_parser(
        "train", help="train a preset", description="Train a preset; every setting can be set."
    )
    train.add_argument(
        "preset", nargs="?", choices=sorted(PRESETS), metavar="PRESET",
        help=f"one of {', '.join(sorted(PRESETS))} (default {DEFAULT_PRESET})",
    )  # fmt: skip
    train.add_argument(
        "--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its newest checkpoint"
    )
    # every preset's settings (DEFAULT_PRESET's first); a setting the chosen preset does
    # not have is a usage error naming it (Preset.override)
    names = [DEFAULT_PRESET, *sorted(set(PRESETS) - {DEFAULT_PRESET})]
    add_setting_options(train, [get_preset(n) for n in names], skip=("resume",))
    train.set_defaults(command_parser=train)

    ev = commands.add_parser(
        "eval", help="evaluate a checkpoint", description="Evaluate a checkpoint."
    )
    ev.add_argument("checkpoint", metavar="CHECKPOINT", help="a checkpoint file or a run directory")
    ev.add_argument("--episodes", type=_positive_int, default=10, help="episodes (default 10)")
    ev.add_argument("--seed", type=int, default=0, help="eval env seed (default 0)")
    ev.add_argument("--stochastic", action="store_true", help="sample actions instead of the mode")

    plot = commands.add_parser(
        "plot", help="plot a run's learning curve", description="Write a PNG."
    )
    plot.add_argument("run_dir", metavar="RUN_DIR", help="a run directory")
    plot.add_argument("--out", help="the PNG to write (default RUN_DIR/learning_curve.png)")
    plot.add_argument("--metric", default="eval/return", help="the metric (default eval/return)")
    return parser


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not an int >= 1")
    return value


def run(argv: Sequence[str], started: float, ray_lease: RayLease | None = None) -> int:
    """Parses ``argv`` and runs its command; returns the exit status.

    Args:
        argv: the arguments after ``tdscheme``.
        started: ``time.time()`` when the command started (a fallback for the
            process start time in the summary).
        ray_lease: a lease on the Ray the entry point started for ``train``;
            released here if the parsed ``ray_init_config`` differs from its config.

    Returns:
        0 on success, 1 on a runtime error; usage errors exit with status 2 (argparse).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_driver_logging(logging.INFO if args.verbose else logging.WARNING)
    try:
        if args.command == "train":
            return _train(args, started, ray_lease)
        return {"eval": _eval, "plot": _plot}[args.command](args)
    except (CheckpointError, FileNotFoundError) as err:
        print(f"tdscheme {args.command}: error: {err}", file=sys.stderr)
        return 1


# -- train ------------------------------------------------------------------------------


def _train(args: argparse.Namespace, started: float, ray_lease: RayLease | None) -> int:
    sub = args.command_parser  # its usage errors show the train usage
    skip = ("command", "command_parser", "verbose", "preset", "resume")
    overrides = {k: v for k, v in vars(args).items() if k not in skip}
    preset = _train_preset(args, overrides, sub)
    if ray_lease is not None and ray_lease.config != preset.scheme.ray_init_config:
        ray_lease.release()  # the run starts or joins the Ray it asks for instead
    run_dir = Path(preset.trainer.run_dir)
    print(f"tdscheme train {preset.name}: run directory {run_dir}", flush=True)
    setup_s = time.time() - _process_start(started)
    try:
        trainer = preset.build_trainer()
    except NotImplementedError as err:
        sub.error(setting_error(err, overrides))
    with trainer:
        summary = trainer.run()
    _print_summary(summary, setup_s, resumed=preset.trainer.resume)
    return 0


def _check_known(preset: Preset, overrides: dict[str, Any], sub: argparse.ArgumentParser) -> None:
    """Options of another preset's settings (the parser has every preset's) are usage errors."""
    owners = preset.setting_owners()
    for name in overrides:
        if name not in owners:
            sub.error(
                f"argument {option_name(name)}: not a setting of preset {preset.name} "
                f"(another preset's); see tdscheme train {preset.name} --help"
            )


def _train_preset(
    args: argparse.Namespace, overrides: dict[str, Any], sub: argparse.ArgumentParser
) -> Preset:
    try:
        if args.resume is not None:
            if args.preset is not None:
                sub.error("argument PRESET: not allowed with --resume (the run's preset is reused)")
            config_path = Path(args.resume) / CONFIG_FILE
            if not config_path.is_file():
                sub.error(
                    f"argument --resume: {args.resume} has no {CONFIG_FILE}; not a tdscheme run"
                )
            saved = json.loads(config_path.read_text(encoding="utf-8"))
            overrides = {**overrides, "run_dir": str(args.resume), "resume": True}
            base = preset_from_dict(saved)
            _check_known(base, overrides, sub)
            return base.override(overrides)
        preset = get_preset(args.preset or DEFAULT_PRESET)
        _check_known(preset, overrides, sub)
        if "run_dir" not in overrides:
            overrides["run_dir"] = str(_new_run_dir(preset.name))
        return preset.override(overrides)
    except (ValueError, TypeError) as err:
        sub.error(setting_error(err, overrides))
    raise AssertionError("unreachable")


def _new_run_dir(name: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = Path("runs") / f"{name}-{stamp}"
    suffix = 1
    while path.exists():
        suffix += 1
        path = Path("runs") / f"{name}-{stamp}-{suffix}"
    return path


def _process_start(fallback: float) -> float:
    try:
        import psutil

        return psutil.Process().create_time()
    except Exception:  # psutil missing or the platform hides it: time since main() instead
        return fallback


def _print_summary(summary: dict[str, Any], setup_s: float, *, resumed: bool) -> None:
    line = f"done: {summary['frames']} frames in {summary['elapsed_s']:.1f} s"
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
    print(f"logs: {summary['run_dir']}/metrics.csv (plot with: tdscheme plot {summary['run_dir']})")
    print("summary: " + json.dumps(summary), flush=True)


# -- eval and plot ----------------------------------------------------------------------


def _eval(args: argparse.Namespace) -> int:
    path = Path(args.checkpoint)
    if path.is_dir():
        latest = CheckpointManager(
            path / "checkpoints" if (path / "checkpoints").is_dir() else path
        ).latest()
        if latest is None:
            raise FileNotFoundError(f"no checkpoint (ckpt_*.pt) in {path}")
        path = latest
    state = load_checkpoint(path)
    config = state.get("config") if isinstance(state, dict) else None
    if not config:
        raise CheckpointError(
            f"checkpoint file {path} has no preset config; accepted: a checkpoint written by "
            f"`tdscheme train` (or a Trainer given run_config=preset.to_dict())"
        )
    preset = preset_from_dict(config)
    learner = preset.learner_factory()(**preset.policy_factory()())
    learner.load_state_dict(state["scheme"]["learner"])
    env = preset.eval_env_factory()()
    try:
        env.set_seed(args.seed)
        result = evaluate(
            env, learner.policy, episodes=args.episodes, deterministic=not args.stochastic,
            max_steps=preset.trainer.eval_max_steps,
        )  # fmt: skip
    finally:
        env.close()
    frames = state["scheme"].get("frames")
    print(
        f"{preset.name} at {frames} frames ({path}): mean return {result.mean_return:.2f}, "
        f"std {result.std_return:.2f} over {len(result.returns)} episodes"
    )
    print("eval: " + json.dumps({"checkpoint": str(path), "frames": frames, **result.metrics("")}))
    return 0


def _plot(args: argparse.Namespace) -> int:
    try:
        out = plot_learning_curve(args.run_dir, args.out, metric=args.metric)
    except ValueError as err:
        print(f"tdscheme plot: error: {err}", file=sys.stderr)
        return 1
    print(f"wrote {out}")
    return 0
