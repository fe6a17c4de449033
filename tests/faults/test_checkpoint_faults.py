"""Checkpoints: a process killed in the middle of a save leaves the previous ones intact; every
damaged checkpoint is named. (Damaged newest: tests/engine/test_checkpoint.py and, for
``tdscheme eval``, tests/faults/test_cli_errors.py.)"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from tdscheme.engine import CheckpointManager
from tdscheme.errors import CheckpointError


@pytest.mark.timeout(120)
def test_a_process_killed_during_a_save_leaves_the_previous_checkpoints(tmp_path, caplog):
    manager = CheckpointManager(tmp_path)
    manager.save({"w": torch.ones(2)}, 10)
    manager.save({"w": torch.full((2,), 2.0)}, 20)
    script = (
        "import os, torch, tdscheme.engine.checkpoint as c\n"
        "def dying(obj, f):\n    f.write(b'x' * 4096); f.flush(); os._exit(9)\n"
        "c.torch.save = dying\n"
        f"c.CheckpointManager({str(tmp_path)!r}).save({{'w': torch.zeros(2)}}, 30)\n"
    )
    assert subprocess.run([sys.executable, "-c", script], timeout=120).returncode == 9
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # the dead save's
    manager = CheckpointManager(tmp_path)  # removes it, with a warning
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert "did not finish" in caplog.text
    assert [p.name for p in manager.list()] == ["ckpt_000000000010.pt", "ckpt_000000000020.pt"]
    assert float(manager.load()["w"][0]) == 2.0


def test_every_damaged_checkpoint_is_named(tmp_path):
    manager = CheckpointManager(tmp_path)
    paths = [manager.save({"w": torch.ones(2)}, step) for step in (1, 2)]
    paths[0].write_bytes(paths[0].read_bytes()[:100])
    paths[1].write_bytes(b"\0" * 100)
    with pytest.raises(CheckpointError, match="every checkpoint") as info:
        manager.load()
    assert all(str(p) in str(info.value) for p in paths)
