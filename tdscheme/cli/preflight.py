"""What ``tdscheme`` checks before it makes a run directory or starts Ray: the optional packages.

A new run and a resumed one (``--resume``) go through the same checks, after every
setting has been checked (:mod:`tdscheme.cli.parser`):

* each optional package the run needs (:meth:`tdscheme.presets.Preset.missing_packages`:
  EnvPool, ale-py, MuJoCo, the logger's, the video extra's) is a usage error naming the
  setting and the extra to install (``pip install 'tdscheme[envpool]'``);
* ``--prioritized`` needs torchrl's C++ extension (its segment trees): whether it loads
  with the installed torch is asked of the shared libraries in a child process (about a
  second, no torch import here; the entry point starts it before it parses a command line
  that may need it, so that the two overlap); where that cannot tell, torchrl itself is
  imported (seconds).

Nothing here imports torch, tensordict or torchrl in this process unless the child
process cannot answer.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import subprocess
import sys
from typing import Any

from tdscheme.cli.options import option_name

__all__ = [
    "check_packages",
    "check_prioritized",
    "may_need_the_extension",
    "prioritized_error",
    "start_probe",
]

#: Run in a child process: loads torch's shared libraries, then torchrl's extension, as
#: ``import torchrl`` would, without importing torch; prints ``ok``, ``error <reason>``
#: or ``unknown`` (a layout it does not know: another platform, a torch without them).
_EXTENSION_PROBE = r"""
import ctypes, importlib.util, os, pathlib, sys
torch_spec, torchrl_spec = importlib.util.find_spec("torch"), importlib.util.find_spec("torchrl")
if torch_spec is None or torchrl_spec is None:
    print("unknown"); sys.exit()
lib = pathlib.Path(torch_spec.origin).parent / "lib"
found = sorted(pathlib.Path(torchrl_spec.origin).parent.glob("_torchrl*.so"))
names = ("libc10.so", "libtorch_cpu.so", "libtorch.so", "libtorch_python.so")
if not found or not all((lib / name).is_file() for name in names):
    print("unknown"); sys.exit()
try:
    for name in names:
        ctypes.CDLL(str(lib / name), mode=os.RTLD_GLOBAL | os.RTLD_NOW)
    ctypes.CDLL(str(found[0]), mode=os.RTLD_NOW)
except OSError as err:
    print("error", str(err).replace("\n", " ")); sys.exit()
print("ok")
"""

#: The longest the child process may take before the check falls back to importing torchrl.
PROBE_TIMEOUT_S = 30.0


def check_packages(preset: Any, sub: argparse.ArgumentParser) -> None:
    """A usage error (status 2) naming the first optional package the run needs and lacks.

    Args:
        preset: the run's :class:`~tdscheme.presets.Preset`.
        sub: the command's parser (its ``error`` prints the usage line and exits).
    """
    for setting, err in preset.missing_packages():
        sub.error(f"argument {option_name(setting)}: {err}")


def check_prioritized(
    preset: Any, sub: argparse.ArgumentParser, probe: subprocess.Popen | None = None
) -> None:
    """A usage error when ``--prioritized`` is asked for and torchrl's extension does not load.

    Args:
        preset: the run's preset.
        sub: the command's parser.
        probe: a probe :func:`start_probe` started early (it ran while the command line
            was parsed), or ``None`` to run one now.
    """
    if getattr(preset.algo, "prioritized", False):
        message = prioritized_error(probe)
        if message is not None:
            sub.error(f"argument --prioritized: {message}")
    elif probe is not None:
        probe.kill()  # not needed after all (a resumed run without --prioritized)
        probe.wait()


def may_need_the_extension(argv: list[str]) -> bool:
    """Whether a command line may ask for ``--prioritized`` (directly, or a run it resumes)."""
    return bool(argv) and argv[0] == "train" and ("--prioritized" in argv or "--resume" in argv)


def start_probe() -> subprocess.Popen:
    """Starts the child process that asks whether torchrl's extension loads (see the module)."""
    return subprocess.Popen(
        [sys.executable, "-c", _EXTENSION_PROBE], stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip


def prioritized_error(probe: subprocess.Popen | None = None) -> str | None:
    """Why prioritized replay cannot run here (torchrl's C++ extension does not load), or ``None``.

    Args:
        probe: a probe :func:`start_probe` started; ``None``: one is started now.
    """
    try:
        probe = start_probe() if probe is None else probe
        answer, _ = probe.communicate(timeout=PROBE_TIMEOUT_S)
        answer = answer.strip()
    except (OSError, subprocess.TimeoutExpired):
        if probe is not None:
            probe.kill()
            probe.wait()
        answer = "unknown"
    if answer == "ok":
        return None
    if answer.startswith("error "):
        return _message(_reason(answer.removeprefix("error ")))
    return _imported_error()


def _imported_error() -> str | None:
    """The same answer from torchrl itself (it imports torch: seconds)."""
    from torchrl.data.replay_buffers.samplers.prioritized import SumSegmentTreeFp32

    if SumSegmentTreeFp32 is not None:
        return None
    try:
        import torchrl._torchrl  # noqa: F401 - only for the reason it does not load

        reason = "it imports, but has no segment trees"
    except ImportError as err:
        reason = _reason(str(err))
    return _message(reason)


def _reason(message: str) -> str:
    if "undefined symbol" in message:
        return "an undefined symbol: it was built for another torch"
    return message.strip()[:120] or "it does not load"


def _message(reason: str) -> str:
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = "(not installed)"
    return (
        f"prioritized replay needs torchrl's C++ extension (torchrl._torchrl, its segment "
        f"trees), which does not load with torch {torch_version} here ({reason}); install a "
        f"torchrl build for this torch, or leave --prioritized out"
    )
