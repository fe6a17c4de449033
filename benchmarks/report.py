"""What every benchmark script shares: the machine it ran on and one JSON line per measurement.

The scripts run from the repository root as ``python benchmarks/NAME.py``, so this module
is importable as ``report``.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from dataclasses import asdict
from typing import Any

import gymnasium
import ray
import tensordict
import torch
import torchrl


def machine_info() -> dict[str, Any]:
    """The machine, the library versions, the load and the tdscheme commit (``+dirty`` if edited)."""

    def git(*args: str) -> str:
        try:
            out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10)
            return out.stdout.strip()
        except OSError:
            return ""

    commit = git("rev-parse", "--short", "HEAD") + ("+dirty" if git("status", "--short") else "")
    return {
        "cpu_count": os.cpu_count(),
        "load_1m": round(os.getloadavg()[0], 2),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "ray": ray.__version__,
        "torchrl": torchrl.__version__,
        "tensordict": tensordict.__version__,
        "gymnasium": gymnasium.__version__,
        "tdscheme_commit": commit,
    }


class Recorder:
    """Keeps the measurements (dataclasses) and prints each as a JSON line, with the machine."""

    def __init__(self) -> None:
        self.machine = machine_info()
        self.measurements: list[Any] = []

    def add(self, measurement: Any) -> None:
        """Keeps ``measurement`` and prints it as one JSON line."""
        self.measurements.append(measurement)
        print(json.dumps({**asdict(measurement), **self.machine}), flush=True)
