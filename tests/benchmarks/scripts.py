"""Loading ``benchmarks/`` scripts in tests: they are a script folder, not a package."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load_script(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` as module ``name``, registered in ``sys.modules``.

    Registered because dataclasses look their module up, and the scripts import each other
    by these names (``learning`` imports ``harness``, ``layout_worker`` imports ``peers``).
    """
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
