"""CheckpointManager, save_checkpoint/load_checkpoint and to_safe."""

from __future__ import annotations

import collections
import fractions
import logging
import random

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from tdscheme.engine import checkpoint
from tdscheme.engine.checkpoint import CheckpointManager, load_checkpoint, save_checkpoint, to_safe
from tdscheme.errors import CheckpointError


def _learner_state() -> dict:
    module = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    optimizer = torch.optim.Adam(module.parameters(), lr=1e-3)
    module(torch.randn(5, 3)).sum().backward()
    optimizer.step()
    return {"module": module.state_dict(), "optimizer": optimizer.state_dict()}


def test_round_trip_of_a_realistic_state(tmp_path):
    learner = _learner_state()
    state = {
        "learner": learner,
        "batch": TensorDict(
            {"obs": torch.arange(6.0).view(3, 2), ("next", "r"): torch.ones(3)}, [3]
        ),
        "numpy_rng": np.random.get_state(),
        "python_rng": random.getstate(),
        "frames": 1200,
        "ratio": 0.25,
        "name": "ppo",
        "done": False,
        "nothing": None,
        "history": [1.0, (2, "x")],
    }
    path = save_checkpoint(tmp_path / "x.pt", state, step=7)
    loaded = load_checkpoint(path)

    module = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    module.load_state_dict(loaded["learner"]["module"])
    for key, value in learner["module"].items():
        assert torch.equal(module.state_dict()[key], value)
    assert loaded["learner"]["module"]._metadata == learner["module"]._metadata
    optimizer = torch.optim.Adam(module.parameters(), lr=1.0)
    optimizer.load_state_dict(loaded["learner"]["optimizer"])
    assert optimizer.param_groups[0]["lr"] == 1e-3
    assert optimizer.param_groups[0]["betas"] == (0.9, 0.999)

    assert torch.equal(loaded["batch"]["obs"], torch.arange(6.0).view(3, 2))
    assert torch.equal(loaded["batch"]["next"]["r"], torch.ones(3))
    name, keys, *rest = loaded["numpy_rng"]
    np.random.set_state((name, keys.numpy(), *rest))
    assert random.setstate(loaded["python_rng"]) is None
    assert loaded["frames"] == 1200 and loaded["ratio"] == 0.25 and loaded["name"] == "ppo"
    assert loaded["done"] is False and loaded["nothing"] is None
    assert loaded["history"] == [1.0, (2, "x")]


def test_to_safe_names_the_path_of_an_unsupported_object():
    with pytest.raises(TypeError, match=r"state\['learner'\]\['foo'\] has type function"):
        to_safe({"learner": {"foo": lambda: 0}})
    with pytest.raises(TypeError, match=r"state\['xs'\]\[1\] has type object"):
        to_safe({"xs": [1, object()]})
    with pytest.raises(TypeError, match=r"state\['a'\] is a numpy array of dtype object"):
        to_safe({"a": np.array([None, 1], dtype=object)})
    with pytest.raises(TypeError, match=r"state has the key \(1, 2\) of type tuple"):
        to_safe({(1, 2): 0})


def test_to_safe_makes_plain_tensors_and_numbers():
    safe = to_safe({"p": torch.nn.Parameter(torch.ones(2)), "n": np.float32(1.5), "i": np.int64(3)})
    assert type(safe["p"]) is torch.Tensor and not safe["p"].requires_grad
    assert safe["n"] == 1.5 and type(safe["n"]) is float
    assert safe["i"] == 3 and type(safe["i"]) is int


def test_save_rejects_unsupported_state_before_writing(tmp_path):
    with pytest.raises(TypeError, match=r"state\['bad'\]"):
        save_checkpoint(tmp_path / "x.pt", {"bad": object()})
    with pytest.raises(TypeError, match="state must be a dict"):
        save_checkpoint(tmp_path / "x.pt", [1, 2])
    assert list(tmp_path.iterdir()) == []


def test_garbage_file_raises_checkpoint_error_naming_it(tmp_path):
    path = tmp_path / "ckpt_000000000001.pt"
    path.write_bytes(b"this is not a checkpoint" * 10)
    with pytest.raises(CheckpointError, match="corrupt, truncated or unreadable") as info:
        load_checkpoint(path)
    assert str(path) in str(info.value)
    assert isinstance(info.value, ValueError)


def test_truncated_checkpoint_raises_checkpoint_error(tmp_path):
    path = save_checkpoint(tmp_path / "x.pt", {"w": torch.randn(1000)})
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="corrupt, truncated or unreadable") as info:
        load_checkpoint(path)
    assert str(path) in str(info.value)


def test_missing_file_raises_file_not_found_naming_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.pt"):
        load_checkpoint(tmp_path / "nope.pt")


def test_unsafe_pickle_is_refused(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save(
        {"format": checkpoint.FORMAT, "version": 1, "state": {"x": fractions.Fraction(1, 3)}}, path
    )
    with pytest.raises(CheckpointError, match="weights_only") as info:
        load_checkpoint(path)
    assert str(path) in str(info.value)


def test_format_marker_and_version_are_checked(tmp_path):
    foreign = tmp_path / "foreign.pt"
    torch.save({"w": torch.zeros(1)}, foreign)
    with pytest.raises(CheckpointError, match="not a tdscheme checkpoint"):
        load_checkpoint(foreign)
    future = tmp_path / "future.pt"
    torch.save({"format": checkpoint.FORMAT, "version": 99, "step": 0, "state": {}}, future)
    with pytest.raises(CheckpointError, match="version 99"):
        load_checkpoint(future)


def test_failed_save_keeps_the_previous_file_and_leaves_no_temp_file(tmp_path, monkeypatch):
    path = save_checkpoint(tmp_path / "x.pt", {"w": torch.zeros(3)})

    def broken_save(obj, f):
        f.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint.torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(path, {"w": torch.ones(3)})
    monkeypatch.undo()
    assert torch.equal(load_checkpoint(path)["w"], torch.zeros(3))
    assert [p.name for p in tmp_path.iterdir()] == ["x.pt"]


def test_manager_keeps_the_last_k_sorted_by_step(tmp_path):
    manager = CheckpointManager(tmp_path / "ckpts", keep_last=2)
    assert manager.latest() is None and manager.list() == []
    for step in (5, 100, 20):
        path = manager.save({"step": step}, step)
        assert path.name == f"ckpt_{step:012d}.pt"
    assert [p.name for p in manager.list()] == ["ckpt_000000000020.pt", "ckpt_000000000100.pt"]
    assert manager.latest().name == "ckpt_000000000100.pt"
    assert manager.load()["step"] == 100
    assert manager.load(manager.list()[0])["step"] == 20
    manager.save({"step": 100, "again": True}, 100)  # same step: replaced
    assert manager.load()["again"] is True and len(manager.list()) == 2


def test_manager_keep_all_and_ignores_other_files(tmp_path):
    (tmp_path / "notes.txt").write_text("hi")
    (tmp_path / "ckpt_abc.pt").write_text("hi")
    manager = CheckpointManager(tmp_path, keep_last=None)
    for step in range(5):
        manager.save({"step": step}, step)
    assert len(manager.list()) == 5


def test_manager_load_falls_back_past_a_damaged_latest(tmp_path, caplog):
    manager = CheckpointManager(tmp_path)
    manager.save({"step": 1}, 1)
    latest = manager.save({"step": 2}, 2)
    latest.write_bytes(latest.read_bytes()[:100])
    with caplog.at_level(logging.WARNING, logger=checkpoint.__name__):
        assert manager.load()["step"] == 1
    assert str(latest) in caplog.text
    with pytest.raises(CheckpointError):
        manager.load(latest)  # an explicit path never falls back
    manager.list()[0].write_bytes(b"junk")
    with pytest.raises(CheckpointError, match="every checkpoint"):
        manager.load()


def test_manager_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        CheckpointManager(tmp_path).load()
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="keep_last"):
            CheckpointManager(tmp_path, keep_last=bad)
    manager = CheckpointManager(tmp_path)
    for bad in (-1, 1.0, "3", True):
        with pytest.raises(ValueError, match=f"step must be a non-negative int, got {bad!r}"):
            manager.save({}, bad)


def test_manager_removes_stale_temp_files(tmp_path):
    stale = tmp_path / ".ckpt_abc.tmp"
    stale.write_bytes(b"half a checkpoint")
    CheckpointManager(tmp_path)
    assert not stale.exists()


def test_ordered_dict_stays_ordered(tmp_path):
    state = collections.OrderedDict([("b", 1), ("a", 2)])
    loaded = load_checkpoint(save_checkpoint(tmp_path / "x.pt", {"od": state}))
    assert isinstance(loaded["od"], collections.OrderedDict)
    assert list(loaded["od"]) == ["b", "a"]
