"""The ``tdscheme`` command's parser, and the preset a ``train`` command asks for.

Nothing here imports torch: :mod:`tdscheme.cli.main` parses the command line and
makes the preset (which checks every setting) before it starts Ray, so that a
user's mistake is one line within a second or two, not after Ray's start.

Example:
    >>> args = build_parser().parse_args(["train", "ppo-cartpole", "--lr", "1e-3",
    ...                                   "--run-dir", "runs/x"])
    >>> preset = train_preset(args)
    >>> preset.name, preset.algo.lr, preset.trainer.run_dir
    ('ppo-cartpole', 0.001, 'runs/x')
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from tdscheme.cli.options import add_setting_options, option_name, setting_error
from tdscheme.cli.preflight import check_packages
from tdscheme.cli.resume import resume_overrides
from tdscheme.engine.trainer_config import CONFIG_FILE
from tdscheme.presets import DEFAULT_PRESET, PRESETS, Preset, get_preset, preset_from_dict

__all__ = ["bench_preset", "build_parser", "train_preset"]

#: The start of train's and bench's usage line: their options (every preset's settings)
#: would fill a screen above each usage error; ``-h`` lists them.
_SHORT_USAGE = "%(prog)s [-h] [PRESET] [--SETTING VALUE ...]"

#: Parsed arguments that are not settings of a preset.
_NOT_SETTINGS = (
    "command", "command_parser", "verbose", "preset", "resume", "seconds",
)  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    """The ``tdscheme`` argument parser: its ``train``, ``bench``, ``eval`` and ``plot`` commands."""
    parser = argparse.ArgumentParser(
        prog="tdscheme", description="TensorDict-native distributed RL on Ray and torchrl."
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true",
        help="log progress details, and INFO records of Ray, torchrl and the workers",
    )  # fmt: skip
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    _preset_command(
        commands, "train", "--resume", metavar="RUN_DIR", usage=" [--resume RUN_DIR]",
        help="train a preset", description="Train a preset; every setting can be set.",
        option_help="continue the run in RUN_DIR from its newest checkpoint",
    )  # fmt: skip
    _preset_command(
        commands, "bench", "--seconds", type=_positive_float, default=10.0, usage=" [--seconds S]",
        help="a preset's collection frames/s here, beside the bare loop's limit",
        description="Measure a preset's collection on this machine: the bare loop (env steps "
        "and policy calls in one process), the preset's RayCollector, each worker's fast path.",
        option_help="each measurement's window (default 10)",
    )  # fmt: skip

    ev = commands.add_parser(
        "eval", help="evaluate a run's checkpoints (test mode) or one checkpoint",
        description="Evaluate every checkpoint of a run (eval.csv and a plot in the run "
        "directory), or one checkpoint file.",
    )  # fmt: skip
    ev.add_argument(
        "checkpoint", metavar="CHECKPOINT", help="a run directory (every checkpoint) or a file"
    )
    ev.add_argument("--checkpoint", dest="pick", default=None,
                    help="one checkpoint of the run: 'latest' or a file name")  # fmt: skip
    ev.add_argument("--eval-workers", type=_nonnegative_int, default=0,
                    help="Ray actors evaluating checkpoints in parallel (default 0: here)")  # fmt: skip
    ev.add_argument("--episodes", type=_positive_int, default=10, help="episodes (default 10)")
    ev.add_argument("--seed", type=int, default=0, help="eval env seed (default 0)")
    ev.add_argument("--stochastic", action="store_true", help="sample actions instead of the mode")
    ev.add_argument(
        "--video", action="store_true",
        help="also record one episode (seed --seed) as an mp4 in RUN_DIR/videos (the video extra)",
    )  # fmt: skip

    plot = commands.add_parser(
        "plot",
        help="plot a run's learning curve, throughput (and policy lag)",
        description="Write learning_curve.png and throughput.png (and policy_lag.png for an "
        "async_learner run).",
    )
    plot.add_argument("run_dir", metavar="RUN_DIR", help="a run directory")
    plot.add_argument("--out", help="the PNG to write (default RUN_DIR/learning_curve.png)")
    plot.add_argument("--metric", default="eval/return", help="the metric (default eval/return)")
    return parser


def _preset_command(
    commands: Any,
    name: str,
    option: str,
    *,
    usage: str,
    option_help: str,
    help: str,
    description: str,
    **option_kwargs: Any,
) -> argparse.ArgumentParser:
    """A command over a preset (``train``, ``bench``): PRESET, its own option, every setting.

    Every preset's settings are options (DEFAULT_PRESET's first); a setting the chosen
    preset does not have is a usage error naming it (``Preset.override``).
    """
    sub = commands.add_parser(name, help=help, description=description, usage=_SHORT_USAGE + usage)
    sub.add_argument(
        "preset", nargs="?", choices=sorted(PRESETS), metavar="PRESET",
        help=f"one of {', '.join(sorted(PRESETS))} (default {DEFAULT_PRESET})",
    )  # fmt: skip
    sub.add_argument(option, help=option_help, **option_kwargs)
    names = [DEFAULT_PRESET, *sorted(set(PRESETS) - {DEFAULT_PRESET})]
    add_setting_options(sub, [get_preset(n) for n in names], skip=("resume",))
    sub.set_defaults(command_parser=sub)
    return sub


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not an int >= 1")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{value} is not a number > 0")
    return value


def _nonnegative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is not an int >= 0")
    return value


def _check_known(preset: Preset, overrides: dict[str, Any], sub: argparse.ArgumentParser) -> None:
    """Options of another preset's settings (the parser has every preset's) are usage errors."""
    owners = preset.setting_owners()
    for name in overrides:
        if name not in owners:
            sub.error(
                f"argument {option_name(name)}: not a setting of preset {preset.name} "
                f"(another preset's); see tdscheme train {preset.name} --help"
            )


def train_preset(args: argparse.Namespace) -> Preset:
    """The preset ``tdscheme train`` runs: the named one (or the run's, with ``--resume``), overridden.

    Args:
        args: ``build_parser().parse_args(...)`` of a ``train`` command.

    Returns:
        The preset, every setting checked (its configs validate them).

    Raises:
        SystemExit: a usage error (status 2), printed as one line naming the option,
            the value and what is accepted.
    """
    sub = args.command_parser  # its usage errors show the train usage
    overrides = train_overrides(args)
    try:
        if args.resume is not None:
            preset = _resumed_preset(args, overrides, sub)
        else:
            preset = get_preset(args.preset or DEFAULT_PRESET)
            _check_known(preset, overrides, sub)
            if "run_dir" not in overrides:
                overrides["run_dir"] = str(_new_run_dir(preset.name))
            preset = preset.override(overrides)
    except (ValueError, TypeError) as err:
        sub.error(setting_error(err, overrides))
    check_packages(preset, sub)  # a new run and a resumed one alike
    return preset


def _resumed_preset(
    args: argparse.Namespace, overrides: dict[str, Any], sub: argparse.ArgumentParser
) -> Preset:
    """The run's saved preset (``RUN_DIR/config.json``) with the options ``--resume`` may change."""
    if args.preset is not None:
        sub.error("argument PRESET: not allowed with --resume (the run's preset is reused)")
    config_path = Path(args.resume) / CONFIG_FILE
    if not config_path.is_file():
        sub.error(f"argument --resume: {args.resume} has no {CONFIG_FILE}; not a tdscheme run")
    saved = preset_from_dict(json.loads(config_path.read_text(encoding="utf-8")))
    _check_known(saved, overrides, sub)
    kept, notes, errors = resume_overrides(saved, overrides, str(args.resume))
    if errors:
        sub.error("; ".join(errors))
    for note in notes:
        print(f"tdscheme train: {note}", file=sys.stderr)
    return saved.override({**kept, "run_dir": str(args.resume), "resume": True})


def bench_preset(args: argparse.Namespace) -> Preset:
    """The preset ``tdscheme bench`` measures: the named one, with the options given."""
    sub = args.command_parser
    overrides = train_overrides(args)
    preset = get_preset(args.preset or DEFAULT_PRESET)
    _check_known(preset, overrides, sub)
    try:
        preset = preset.override(overrides)
    except (ValueError, TypeError) as err:
        sub.error(setting_error(err, overrides))
    check_packages(preset, sub)  # the env's packages (bench runs no logger, writes no video)
    return preset


def _new_run_dir(name: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = Path("runs") / f"{name}-{stamp}"
    suffix = 1
    while path.exists():
        suffix += 1
        path = Path("runs") / f"{name}-{stamp}-{suffix}"
    return path


def train_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The settings given on the command line (the parser leaves the others unset)."""
    return {k: v for k, v in vars(args).items() if k not in _NOT_SETTINGS}
