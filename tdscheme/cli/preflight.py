"""What ``tdscheme`` checks before it makes a run directory or starts Ray: the optional packages.

A new run and a resumed one (``--resume``) go through the same checks, after every
setting has been checked (:mod:`tdscheme.cli.parser`):

* each optional package the run needs (:meth:`tdscheme.presets.Preset.missing_packages`:
  EnvPool, ale-py, MuJoCo, the logger's, the video extra's) is a usage error naming the
  setting and the extra to install (:func:`tdscheme.validation.install_command`);

Nothing here imports torch, tensordict or torchrl. (``--prioritized`` needs no check: where
torchrl's C++ extension does not load, :mod:`tdscheme.replay.prioritized` samples.)
"""

from __future__ import annotations

import argparse
from typing import Any

from tdscheme.cli.options import option_name

__all__ = ["check_packages"]

def check_packages(preset: Any, sub: argparse.ArgumentParser) -> None:
    """A usage error (status 2) naming the first optional package the run needs and lacks.

    Args:
        preset: the run's :class:`~tdscheme.presets.Preset`.
        sub: the command's parser (its ``error`` prints the usage line and exits).
    """
    for setting, err in preset.missing_packages():
        sub.error(f"argument {option_name(setting)}: {err}")
