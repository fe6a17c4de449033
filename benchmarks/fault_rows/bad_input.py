"""Fault rows of issue 12, section 3: bad numbers, bad configuration, checkpoints, signals, the command.

Each row is a function returning the dict ``benchmarks/faults.py`` records; it runs in
a fresh process (its own ``RAY_TMPDIR``). Heavy imports stay inside the functions.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from faults import row

TIMEOUT_S = 180.0


def _expect_error(
    fault: str,
    build: Callable[[], Any],
    *,
    names: tuple[str, ...],
    bound_s: float = 2.0,
    errors: tuple[type[BaseException], ...] = (ValueError, TypeError),
) -> dict[str, Any]:
    """A row for a constructor that must raise one of ``errors`` naming every word in ``names``."""
    start = time.perf_counter()
    try:
        build()
    except errors as err:
        seconds = time.perf_counter() - start
        message = str(err)
        missing = [name for name in names if name not in message]
        outcome = "wrong result" if missing else "clean error"
        detail = f"{type(err).__name__}: {message}" + (
            f" (does not name {missing})" if missing else ""
        )
        return row(fault, outcome, seconds, bound_s, detail=detail)
    return row(fault, "wrong result", time.perf_counter() - start, bound_s, detail="no error")


# -- configuration --------------------------------------------------------------------


def config_num_collectors_zero() -> dict[str, Any]:
    from tdscheme import SchemeConfig

    return _expect_error(
        "SchemeConfig(num_collectors=0)", lambda: SchemeConfig(num_collectors=0),
        names=("num_collectors", "0"),
    )  # fmt: skip


# -- checkpoints ----------------------------------------------------------------------


def _two_checkpoints(directory: Any) -> tuple[Any, Any]:
    import torch

    from tdscheme.engine import CheckpointManager

    manager = CheckpointManager(directory)
    old = manager.save({"w": torch.ones(2)}, 10)
    new = manager.save({"w": torch.full((2,), 2.0)}, 20)
    return manager, (old, new)


def checkpoint_truncated_names_file() -> dict[str, Any]:
    import tempfile
    from pathlib import Path

    from tdscheme.engine.checkpoint import CheckpointError, load_checkpoint

    with tempfile.TemporaryDirectory() as d:
        _, (_, new) = _two_checkpoints(Path(d))
        data = new.read_bytes()
        new.write_bytes(data[: len(data) // 2])
        return _expect_error(
            "truncated newest checkpoint, loaded by name", lambda: load_checkpoint(new),
            names=(str(new),), errors=(CheckpointError,),
        )  # fmt: skip


def checkpoint_truncated_falls_back() -> dict[str, Any]:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        manager, (_, new) = _two_checkpoints(Path(d))
        data = new.read_bytes()
        new.write_bytes(data[: len(data) // 2])
        start = time.perf_counter()
        state = manager.load()
        seconds = time.perf_counter() - start
        ok = float(state["w"][0]) == 1.0
        return row(
            "truncated newest checkpoint, CheckpointManager.load", "survived" if ok else "wrong result",
            seconds, 2.0, detail="fell back to the previous checkpoint" if ok else f"got {state}",
        )  # fmt: skip


ROWS: list[tuple[str, Callable[[], dict[str, Any]]]] = [
    ("config: num_collectors=0", config_num_collectors_zero),
    ("checkpoint: truncated newest, by name", checkpoint_truncated_names_file),
    ("checkpoint: truncated newest, fallback", checkpoint_truncated_falls_back),
]
