"""The ``tdscheme`` command: train a preset, evaluate a checkpoint, plot a run.

Usage::

    tdscheme train [PRESET] [--SETTING VALUE ...]     # e.g. --total-frames 50000 --lr 1e-3
    tdscheme train --resume RUN_DIR [--SETTING VALUE ...]
    tdscheme bench [PRESET] [--seconds S] [--SETTING VALUE ...]
    tdscheme eval CHECKPOINT_OR_RUN_DIR [--episodes N]
    tdscheme plot RUN_DIR [--out PNG]

Every setting of the preset's ``algo`` (:class:`~tdscheme.presets.ActorCriticConfig`),
``scheme`` (:class:`~tdscheme.SchemeConfig`) and ``trainer``
(:class:`~tdscheme.engine.TrainerConfig`) is an option: ``--frames-per-batch``
for ``frames_per_batch``, ``--sync/--no-sync`` for booleans, ``none`` for an
unset optional value, ``64,64`` for a tuple of ints and JSON for dicts
(``--collector-resources '{"num_cpus": 0.5}'``). ``tdscheme train --help`` lists them.

Start-up: this module imports neither Ray, torch nor torchrl, and installs the
signal handlers first (a Ctrl-C in the first second is a stop request, not a
traceback from inside an import). It parses the command
line and, for ``train``, makes the preset (:mod:`tdscheme.cli.parser`), which
checks every setting: a usage error is one line within a second or two, before
Ray starts. Then it says in one line what the next seconds wait for, and starts Ray
(the preset's ``ray_init_config``) in the main thread while a second thread imports
the commands (torch, torchrl), and a local
Ray's worker processes import torch and torchrl as soon as they are spawned
(:mod:`tdscheme.runtime.ray_lease`): the seconds each of these takes overlap
instead of adding up.

Logging: WARNING, or INFO with ``-v``, for tdscheme, torchrl and Ray, on the
driver and in every worker actor (:mod:`tdscheme.log_levels`), set up once
``argv`` is parsed.
"""

from __future__ import annotations

import importlib
import logging
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tdscheme.log_levels import configure_driver_logging
from tdscheme.runtime import interrupts

if TYPE_CHECKING:
    from tdscheme.runtime import RayLease

__all__ = ["main"]

logger = logging.getLogger(__name__)

_COMMANDS_MODULE = "tdscheme.cli.commands"


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the ``tdscheme`` command; returns the exit status.

    Args:
        argv: the arguments after ``tdscheme`` (default ``sys.argv[1:]``).

    Returns:
        0 on success, 1 on a runtime error, 130 after Ctrl-C (SIGINT) and 143
        after SIGTERM: the run stops after its current step, writes a final
        checkpoint, shuts its workers and its Ray down and says so in one line
        (:mod:`tdscheme.runtime.interrupts`); usage errors exit with status 2.
    """
    started = time.time()
    argv = list(sys.argv[1:] if argv is None else argv)
    interrupts.install()  # SIGINT / SIGTERM: stop between steps (re-installed after ray.init)
    lease = None
    forced_line = None
    verbose = False
    try:
        from tdscheme.cli.parser import bench_preset, build_parser, train_preset

        args = build_parser().parse_args(argv)  # a usage error exits here with status 2
        verbose = args.verbose
        configure_driver_logging(logging.INFO if verbose else logging.WARNING)
        preset = None
        if args.command in ("train", "bench"):
            # every setting checked, still before Ray
            preset = train_preset(args) if args.command == "train" else bench_preset(args)
            if args.command == "train":  # the seconds until the run directory line are silent
                print(_startup_line(preset.name), flush=True)
            lease = _start_ray_while_importing(preset.scheme.ray_init_config)
        from tdscheme.cli import commands

        return commands.run(args, preset, started, ray_lease=lease)
    except BaseException as err:
        name = interrupts.stop_requested() or (
            "SIGINT" if isinstance(err, KeyboardInterrupt) else None
        )
        if name is None:
            raise
        if verbose:
            logger.warning("interrupted here", exc_info=err)
        forced_line = (
            f"tdscheme: {name}: stopped at once (before training started, on a second signal, "
            f"or a step that outlasted the grace period); no final checkpoint (the last "
            f"periodic one stands); workers and Ray shut down"
        )
        return 128 + signal.Signals[name].value
    finally:
        if lease is not None:
            lease.release()
        interrupts.uninstall()
        if forced_line is not None:
            print(forced_line, file=sys.stderr, flush=True)


def _startup_line(preset_name: str) -> str:
    """What the first seconds of ``train`` wait for, said before they start.

    Measured on a 2-core machine (issue 64): the driver's import of torch and torchrl,
    and each Ray worker's (Ray starts one per CPU, each importing the collector's
    modules), take about 5 CPU-seconds apiece, and Ray's own processes about 4 more;
    the driver's import and ``ray.init`` overlap (:func:`_start_ray_while_importing`).
    """
    return (
        f"tdscheme train {preset_name}: starting or joining Ray while torch and torchrl load, "
        f"here and in each Ray worker process (about 5 CPU-seconds each)"
    )


def _start_ray_while_importing(ray_init_config: dict[str, Any] | None) -> RayLease | None:
    """Starts (or joins) Ray while a thread imports the commands; returns the lease.

    ``ray.init`` stays in the main thread (Ray expects it there). If Ray fails to
    start here, the run tries again later and reports the error itself.
    """
    from tdscheme.runtime import RayLease

    importer = threading.Thread(target=_import_commands, name="tdscheme-import", daemon=True)
    importer.start()
    try:
        lease = RayLease.acquire(ray_init_config)
    except Exception as err:  # the run's own RayLease.acquire raises it with context
        logger.warning("starting Ray early failed (%s); the run starts it", err)
        lease = None
    importer.join()
    return lease


def _import_commands() -> None:
    try:
        importlib.import_module(_COMMANDS_MODULE)
    except BaseException:  # noqa: BLE001 - the main thread's import raises it again
        pass


if __name__ == "__main__":
    sys.exit(main())
