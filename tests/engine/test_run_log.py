"""RunLogger (torchrl CSV logger + metrics.csv), resume and read_metrics."""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import math

import numpy as np
import pytest
import torch
from tensordict import TensorDict

import tdscheme
from tdscheme.engine import run_log
from tdscheme.engine.run_log import RunLogger, read_metrics


def _torchrl_scalars(run_dir, name, exp_name="tdscheme"):
    path = run_dir / exp_name / "scalars" / f"{name}.csv"
    return [line.split(",") for line in path.read_text().splitlines()]


def test_scalars_reach_metrics_csv_and_the_torchrl_logger(tmp_path):
    with RunLogger(tmp_path) as logger:
        logger.log_scalars({"train/loss": 0.5, "eval/return": torch.tensor(20.0)}, step=100)
        logger.log_scalars({"train/loss": np.float32(0.25), "train/flag": True}, step=200)
    assert read_metrics(tmp_path) == {
        "train/loss": [(100, 0.5), (200, 0.25)],
        "eval/return": [(100, 20.0)],
        "train/flag": [(200, 1.0)],
    }
    assert (tmp_path / "metrics.csv").read_text().splitlines()[:2] == [
        "step,name,value",
        "100,train/loss,0.5",
    ]
    assert _torchrl_scalars(tmp_path, "train/loss") == [["100", "0.5"], ["200", "0.25"]]


def test_tensordict_metrics_are_flattened(tmp_path):
    metrics = TensorDict({"loss": {"actor": torch.tensor(1.5), "critic": torch.tensor(2.0)}}, [])
    with RunLogger(tmp_path) as logger:
        logger.log_scalars(metrics, step=1)
    assert read_metrics(tmp_path) == {"loss/actor": [(1, 1.5)], "loss/critic": [(1, 2.0)]}


def test_non_finite_values_are_logged_as_is(tmp_path):
    with RunLogger(tmp_path) as logger:
        logger.log_scalars({"x": float("nan"), "y": torch.tensor(float("inf"))}, step=3)
        logger.log_scalars({"x": -math.inf}, step=4)
    metrics = read_metrics(tmp_path)
    assert math.isnan(metrics["x"][0][1]) and metrics["x"][1] == (4, -math.inf)
    assert metrics["y"] == [(3, math.inf)]


def test_reopening_appends_to_every_log(tmp_path):
    with RunLogger(tmp_path) as logger:
        for step in (1, 2, 3):
            logger.log_scalars({"train/loss": float(step)}, step=step)
    with RunLogger(tmp_path) as logger:
        logger.log_scalars({"train/loss": 4.0}, step=4)
    assert read_metrics(tmp_path)["train/loss"] == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0)]
    assert [row[0] for row in _torchrl_scalars(tmp_path, "train/loss")] == ["1", "2", "3", "4"]
    assert (tmp_path / "metrics.csv").read_text().count("step,name,value") == 1


def test_resume_from_step_drops_rows_logged_after_the_checkpoint(tmp_path):
    with RunLogger(tmp_path) as logger:
        for step in (100, 200, 300):
            logger.log_scalars({"train/loss": step / 100, "eval/return": float(step)}, step=step)
    with RunLogger(tmp_path, resume_from_step=200) as logger:
        logger.log_scalars({"train/loss": 30.0}, step=300)
    metrics = read_metrics(tmp_path)
    assert metrics["train/loss"] == [(100, 1.0), (200, 2.0), (300, 30.0)]
    assert metrics["eval/return"] == [(100, 100.0), (200, 200.0)]
    assert _torchrl_scalars(tmp_path, "train/loss") == [
        ["100", "1.0"],
        ["200", "2.0"],
        ["300", "30.0"],
    ]
    assert _torchrl_scalars(tmp_path, "eval/return") == [["100", "100.0"], ["200", "200.0"]]


def test_a_row_cut_by_a_crash_is_dropped_and_logging_goes_on(tmp_path, caplog):
    with RunLogger(tmp_path) as logger:
        logger.log_scalars({"a": 1.0}, step=1)
    with open(tmp_path / "metrics.csv", "a") as f:
        f.write("2,a,23")  # killed mid-row while writing 23.5: no newline
    with caplog.at_level(logging.WARNING, logger=run_log.__name__):
        assert read_metrics(tmp_path)["a"] == [(1, 1.0)]
        assert "incomplete last row" in caplog.text
        with RunLogger(tmp_path) as logger:
            logger.log_scalars({"a": 3.0}, step=3)
    assert read_metrics(tmp_path)["a"] == [(1, 1.0), (3, 3.0)]
    assert (tmp_path / "metrics.csv").read_text().endswith("1,a,1.0\n3,a,3.0\n")


def test_unreadable_rows_are_skipped_with_a_warning(tmp_path, caplog):
    with RunLogger(tmp_path) as logger:
        logger.log_scalars({"a": 1.0}, step=1)
    with open(tmp_path / "metrics.csv", "a") as f:
        f.write("4,a\n5\nsix,a,1.0\n7,a,x\n")
    with caplog.at_level(logging.WARNING, logger=run_log.__name__):
        assert read_metrics(tmp_path) == {"a": [(1, 1.0)]}
    assert "skipped 4 unreadable rows" in caplog.text


def test_foreign_metrics_file_is_not_appended_to(tmp_path):
    (tmp_path / "metrics.csv").write_text("time,loss\n1,2\n")
    with pytest.raises(ValueError, match="not a tdscheme metrics file"):
        RunLogger(tmp_path)


def test_close_is_idempotent_and_closes_files(tmp_path):
    logger = RunLogger(tmp_path)
    logger.log_scalars({"a": 1.0}, step=0)
    torchrl_files = list(logger.torchrl_logger.experiment.files.values())
    logger.close()
    logger.close()
    assert all(f.closed for f in torchrl_files)
    with pytest.raises(RuntimeError, match="closed"):
        logger.log_scalars({"a": 1.0}, step=1)


@dataclasses.dataclass
class _Optim:
    lr: float = 1e-3
    betas: tuple = (0.9, 0.999)


@dataclasses.dataclass
class _Config:
    env: str = "CartPole-v1"
    optim: _Optim = dataclasses.field(default_factory=_Optim)


def test_log_hparams_flattens_dicts_and_dataclasses(tmp_path):
    with RunLogger(tmp_path) as logger:
        logger.log_hparams(_Config())
        logger.log_hparams({"seed": 0, "nested": {"frames": 1000, "device": None}})
    texts = sorted((tmp_path / "tdscheme" / "texts").glob("hparams*.txt"))
    joined = "\n".join(p.read_text() for p in texts)
    assert "optim/lr: 0.001" in joined and "optim/betas: (0.9, 0.999)" in joined
    assert "env: CartPole-v1" in joined and "nested/device: None" in joined
    assert f"tdscheme_version: {tdscheme.__version__}" in joined
    with RunLogger(tmp_path) as logger, pytest.raises(TypeError, match="config must be a dict"):
        logger.log_hparams([1, 2])


def test_bad_arguments_name_themselves(tmp_path):
    with pytest.raises(
        ValueError,
        match=r"backend must be one of \['csv', 'tensorboard', 'wandb', 'mlflow'\], got 'neptune'",
    ):
        RunLogger(tmp_path, backend="neptune")
    with pytest.raises(ValueError, match="exp_name"):
        RunLogger(tmp_path, exp_name="")
    with pytest.raises(ValueError, match="resume_from_step must be a non-negative int, got -1"):
        RunLogger(tmp_path, resume_from_step=-1)
    with RunLogger(tmp_path) as logger:
        with pytest.raises(
            ValueError, match=r"metrics\['v'\] must be a scalar, got a tensor of shape \(2,\)"
        ):
            logger.log_scalars({"v": torch.zeros(2)}, step=0)
        with pytest.raises(TypeError, match=r"metrics\['s'\] must be a number"):
            logger.log_scalars({"s": "high"}, step=0)
        with pytest.raises(ValueError, match="step must be a non-negative int, got -5"):
            logger.log_scalars({"a": 1.0}, step=-5)
    assert read_metrics(tmp_path) == {}  # nothing half-logged


def test_read_metrics_names_a_run_dir_without_metrics(tmp_path):
    with pytest.raises(FileNotFoundError, match="empty_run"):
        read_metrics(tmp_path / "empty_run")


def test_tensorboard_missing_gives_the_install_command(tmp_path, monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "tensorboard" else real_find_spec(name, *a),
    )
    with pytest.raises(ImportError, match=r"backend='tensorboard'.*pip install tensorboard"):
        RunLogger(tmp_path, backend="tensorboard")
    assert not (tmp_path / "metrics.csv").exists()


@pytest.mark.skipif(
    importlib.util.find_spec("tensorboard") is None, reason="tensorboard is not installed"
)
def test_tensorboard_backend_writes_events_and_metrics_csv(tmp_path):
    with RunLogger(tmp_path, backend="tensorboard") as logger:
        logger.log_scalars({"train/loss": 0.5}, step=10)
    assert list((tmp_path / "tdscheme").glob("events.out.tfevents.*"))
    assert read_metrics(tmp_path) == {"train/loss": [(10, 0.5)]}
