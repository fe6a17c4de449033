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
#: The measuring tools, run as ``python benchmarks/tools/NAME.py``.
TOOLS = BENCHMARKS / "tools"


def load_script(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` (else ``benchmarks/tools/<name>.py``) as module ``name``,
    registered in ``sys.modules``.

    Registered because dataclasses look their module up, and the scripts import each other
    by these names (``learning`` imports ``harness``, ``layout_worker`` imports ``peers``).
    """
    path = BENCHMARKS / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path if path.exists() else TOOLS / path.name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def scripts_on_path() -> Iterator[None]:
    """``benchmarks/`` and ``benchmarks/tools/`` on ``sys.path``, as a script run there has them.

    ``sys.path`` is restored on exit, the entry a tool adds for ``benchmarks/`` included.
    """
    saved = list(sys.path)
    sys.path[:0] = [str(BENCHMARKS), str(TOOLS)]
    try:
        yield
    finally:
        sys.path[:] = saved


@contextlib.contextmanager
def shipped_script(name: str) -> Iterator[ModuleType]:
    """:func:`load_script` ``name``, with the modules Ray's workers need sent by value.

    The script imports its neighbours (``peers``, ``vector_envs``, ...) by their names
    from ``benchmarks/`` and ``benchmarks/tools/`` on ``sys.path`` while it is loaded; the
    session's Ray workers do not see those folders, so the actors and env factories of
    ``peers``, ``vector_envs``, ``layout_worker`` and ``paired_rounds`` go to them by value.
    Undone on exit.
    """
    shipped: list[ModuleType] = []
    with scripts_on_path():
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
