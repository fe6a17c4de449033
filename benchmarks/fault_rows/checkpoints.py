"""Fault rows of issue 12, section 3: damaged checkpoints (loaded by name, resumed, a save cut short).

Each row is a function returning the dict ``benchmarks/faults.py`` records: the newest
or every checkpoint truncated or overwritten, or the process killed in the middle of a
save; loading it by name must be a clean error naming the file, resuming must fall back
to the previous one. Heavy imports stay inside the functions.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from faults import row

from fault_rows._parts import damage, expect_error

TIMEOUT_S = 300.0


def _two_checkpoints(directory: Path) -> tuple[Any, Path, Path]:
    import torch

    from tdscheme.engine import CheckpointManager

    manager = CheckpointManager(directory)
    old = manager.save({"w": torch.ones(2)}, 10)
    new = manager.save({"w": torch.full((2,), 2.0)}, 20)
    return manager, old, new


def checkpoint_by_name(how: str) -> Callable[[], dict[str, Any]]:
    def fn() -> dict[str, Any]:
        from tdscheme.engine.checkpoint import load_checkpoint
        from tdscheme.errors import CheckpointError

        with tempfile.TemporaryDirectory() as d:
            _, _, new = _two_checkpoints(Path(d))
            damage(new, how)
            return expect_error(f"{how} newest checkpoint, loaded by name",
                                 lambda: load_checkpoint(new), names=(str(new),),
                                 errors=(CheckpointError,))  # fmt: skip

    return fn


def checkpoint_fallback(how: str) -> Callable[[], dict[str, Any]]:
    def fn() -> dict[str, Any]:
        import logging

        records: list[str] = []
        handler = logging.Handler()
        handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
        logging.getLogger("tdscheme").addHandler(handler)
        with tempfile.TemporaryDirectory() as d:
            manager, _, new = _two_checkpoints(Path(d))
            damage(new, how)
            start = time.perf_counter()
            state = manager.load()
            warned = any(str(new) in r for r in records)
            ok = float(state["w"][0]) == 1.0 and warned
            return row(f"{how} newest checkpoint: load (resume) falls back",
                       "survived" if ok else "wrong result", time.perf_counter() - start, 2.0,
                       detail=f"previous checkpoint loaded, warning naming the file={warned}")  # fmt: skip

    return fn


def checkpoint_all_damaged() -> dict[str, Any]:
    from tdscheme.errors import CheckpointError

    with tempfile.TemporaryDirectory() as d:
        manager, old, new = _two_checkpoints(Path(d))
        damage(old, "truncated")
        damage(new, "garbage")
        return expect_error("every checkpoint damaged", manager.load,
                             names=(str(old), str(new), "every checkpoint"),
                             errors=(CheckpointError,))  # fmt: skip


def checkpoint_crash_during_save() -> dict[str, Any]:
    from tdscheme.engine import CheckpointManager

    with tempfile.TemporaryDirectory() as d:
        _, old, new = _two_checkpoints(Path(d))
        script = (
            "import os, torch, tdscheme.engine.checkpoint as c\n"
            "def dying(obj, f):\n    f.write(b'x' * 4096); f.flush(); os._exit(9)\n"
            "c.torch.save = dying\n"
            f"c.CheckpointManager({d!r}).save({{'w': torch.zeros(2)}}, 30)\n"
        )
        code = subprocess.run([sys.executable, "-c", script], timeout=120).returncode
        leftovers = [p.name for p in Path(d).iterdir() if p.name.endswith(".tmp")]
        start = time.perf_counter()  # the recovery: the next start of the run's manager
        manager = CheckpointManager(d)  # removes the dead save's temporary file
        state = manager.load()
        ok = (code == 9 and float(state["w"][0]) == 2.0 and leftovers
              and not [p for p in Path(d).iterdir() if p.name.endswith(".tmp")]
              and [p.name for p in manager.list()] == [old.name, new.name])  # fmt: skip
        return row("process killed in the middle of a checkpoint save",
                   "survived" if ok else "wrong result", time.perf_counter() - start, 30.0,
                   detail=f"previous checkpoints intact, the dead save's {leftovers} removed at start")  # fmt: skip


ROWS: list[tuple[str, Callable[[], dict[str, Any]]]] = [
    ("checkpoint: truncated, by name", checkpoint_by_name("truncated")),
    ("checkpoint: garbage, by name", checkpoint_by_name("garbage")),
    ("checkpoint: truncated newest, fallback", checkpoint_fallback("truncated")),
    ("checkpoint: garbage newest, fallback", checkpoint_fallback("garbage")),
    ("checkpoint: all damaged", checkpoint_all_damaged),
    ("checkpoint: crash during save", checkpoint_crash_during_save),
]  # fmt: skip
