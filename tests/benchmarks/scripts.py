"""Loading ``benchmarks/`` scripts in tests: they are a script folder, not a package."""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import ray

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


@contextlib.contextmanager
def shipped_script(name: str) -> Iterator[ModuleType]:
    """``benchmarks/<name>.py`` loaded, with the modules Ray's workers need sent by value.

    The script imports its neighbours (``peers``, ``vector_envs``, ...) by their names
    from ``benchmarks/`` on ``sys.path`` while it is loaded; the session's Ray workers
    do not see that folder, so the actors and env factories of ``peers``,
    ``vector_envs``, ``layout_worker`` and ``paired_rounds`` go to them by value. Undone on exit.
    """
    sys.path.insert(0, str(BENCHMARKS))
    shipped: list[ModuleType] = []
    try:
        module = load_script(name)
        shipped = [
            sys.modules[n] for n in ("peers", "vector_envs", "layout_worker", "paired_rounds")
        ]
        for shipped_module in shipped:
            ray.cloudpickle.register_pickle_by_value(shipped_module)
        yield module
    finally:
        for shipped_module in shipped:
            ray.cloudpickle.unregister_pickle_by_value(shipped_module)
        sys.path.remove(str(BENCHMARKS))
