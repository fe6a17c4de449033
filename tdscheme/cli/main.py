"""The ``tdscheme`` command: train a preset, evaluate a checkpoint, plot a run.

Usage::

    tdscheme train [PRESET] [--SETTING VALUE ...]     # e.g. --total-frames 50000 --lr 1e-3
    tdscheme train --resume RUN_DIR [--SETTING VALUE ...]
    tdscheme eval CHECKPOINT_OR_RUN_DIR [--episodes N]
    tdscheme plot RUN_DIR [--out PNG]

Every setting of the preset's ``algo`` (:class:`~tdscheme.presets.ActorCriticConfig`),
``scheme`` (:class:`~tdscheme.SchemeConfig`) and ``trainer``
(:class:`~tdscheme.engine.TrainerConfig`) is an option: ``--frames-per-batch``
for ``frames_per_batch``, ``--sync/--no-sync`` for booleans, ``none`` for an
unset optional value, ``64,64`` for a tuple of ints and JSON for dicts
(``--collector-resources '{"num_cpus": 0.5}'``). ``tdscheme train --help`` lists them.

Start-up: this module imports only Ray. For ``train`` (not ``--resume``) it
starts Ray (with ``--ray-init-config`` when given) in the main thread while a
second thread imports the commands (torch, torchrl, the presets), and a local
Ray's worker processes import torch and torchrl as soon as they are spawned
(:mod:`tdscheme.runtime.ray_lease`): the seconds each of these takes overlap instead of
adding up. Should the parsed settings ask for another Ray, the early one is
given back before the run starts its own. The price: a usage error of
``train`` is reported once that Ray is up, and the command exits once it is down
again (a few seconds later than it would otherwise).

Logging: WARNING, or INFO with ``-v``, for tdscheme, torchrl and Ray, on the
driver and in every worker actor (:mod:`tdscheme.log_levels`). It is set up
before Ray starts, from a look at ``argv``, and again once ``argv`` is parsed.
"""

from __future__ import annotations

import importlib
import json
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
    try:
        configure_driver_logging(logging.INFO if _verbose(argv) else logging.WARNING)
        usage_error = _early_usage_error(argv)
        if usage_error is not None:  # before Ray starts: the user waits for nothing
            print(f"usage: tdscheme train [PRESET] [--SETTING VALUE ...]\n"
                  f"tdscheme train: error: {usage_error}", file=sys.stderr)  # fmt: skip
            return 2
        early, ray_init_config = _early_ray(argv)
        if early:
            lease = _start_ray_while_importing(ray_init_config)
        from tdscheme.cli import commands

        return commands.run(argv, started, ray_lease=lease)
    except BaseException as err:
        name = interrupts.stop_requested() or (
            "SIGINT" if isinstance(err, KeyboardInterrupt) else None
        )
        if name is None:
            raise
        if _verbose(argv):
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


def _verbose(argv: list[str]) -> bool:
    """A look at ``argv`` before parsing: is the global ``-v``/``--verbose`` given?

    Global options come before the command word; argparse accepts any prefix of
    ``--verbose`` (it is the only global long option besides ``--help``).
    """
    for arg in argv:
        if not arg.startswith("-"):
            return False
        if arg == "-v" or (len(arg) >= 3 and "--verbose".startswith(arg)):
            return True
    return False


def _option_value(argv: list[str], option: str) -> str | None:
    """The value given to ``option`` (``--x v`` or ``--x=v``), the last one winning."""
    value = None
    for i, arg in enumerate(argv):
        if arg == option and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(option + "="):
            value = arg.partition("=")[2]
    return value


def _early_usage_error(argv: list[str]) -> str | None:
    """The usage errors of ``train`` that need no import of torch: found before Ray starts.

    ``--env-id`` is looked up in gymnasium's registry (with close names suggested),
    ``--ray-init-config``'s keys are checked against ``ray.init``'s arguments. Every
    other setting is checked when the command has parsed it.
    """
    words = [a for a in argv if not a.startswith("-")]
    if not words or words[0] != "train" or {"-h", "--help"} & set(argv):
        return None
    env_id = _option_value(argv, "--env-id")
    if env_id is not None and _option_value(argv, "--env-backend") in (None, "gymnasium"):
        from tdscheme.env_ids import check_env_id

        try:
            check_env_id(env_id)
        except ValueError as err:
            return f"argument --env-id: {err}"
    text = _option_value(argv, "--ray-init-config")
    if text is not None:
        try:
            config = json.loads(text)
        except json.JSONDecodeError:
            return None  # the parser reports it
        if isinstance(config, dict):
            from tdscheme.runtime.ray_lease import check_init_keys

            try:
                check_init_keys(config)
            except ValueError as err:
                return f"argument --ray-init-config: {err}"
    return None


def _early_ray(argv: list[str]) -> tuple[bool, dict[str, Any] | None]:
    """A look at ``argv`` before parsing: start Ray early? and with which ``ray_init_config``.

    Only for ``train`` without ``--resume`` (whose Ray settings are in its run
    directory) or help; a ``--ray-init-config`` that is not JSON is left to the
    parser to report. A guess is safe: the run compares it with what it parsed.
    """
    if {"-h", "--help", "--resume"} & set(argv) or any(a.startswith("--resume=") for a in argv):
        return False, None
    words = [a for a in argv if not a.startswith("-")]  # the only global option is -v
    if not words or words[0] != "train":
        return False, None
    option = "--ray-init-config"
    for i, arg in enumerate(argv):
        if arg == option or arg.startswith(option + "="):
            text = (
                arg.partition("=")[2] if "=" in arg else (argv[i + 1] if i + 1 < len(argv) else "")
            )
            try:
                config = json.loads(text)
            except json.JSONDecodeError:
                return False, None
            return (True, config) if config is None or isinstance(config, dict) else (False, None)
    return True, None


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
