"""plot_learning_curve writes a PNG from a logged run."""

from __future__ import annotations

import pytest

from tdscheme.engine.plot import plot_learning_curve
from tdscheme.engine.run_log import RunLogger

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _log_run(run_dir, name):
    with RunLogger(run_dir) as logger:
        for step in range(0, 5000, 500):
            logger.log_scalars({name: step / 100, "train/loss": 1.0}, step=step)


def test_default_png_next_to_the_metrics(tmp_path):
    _log_run(tmp_path, "eval/return")
    path = plot_learning_curve(tmp_path)
    assert path == tmp_path / "learning_curve.png"
    assert path.read_bytes()[:8] == PNG_MAGIC


def test_fallback_metric_and_custom_out_path(tmp_path):
    _log_run(tmp_path / "run", "train/episode_return")
    with RunLogger(tmp_path / "run") as logger:  # resumed run, nan values
        logger.log_scalars({"train/episode_return": float("nan")}, step=6000)
    out = tmp_path / "figures" / "curve.png"
    assert plot_learning_curve(tmp_path / "run", out) == out
    assert out.read_bytes()[:8] == PNG_MAGIC


def test_any_metric_can_be_plotted(tmp_path):
    _log_run(tmp_path, "eval/return")
    out = plot_learning_curve(tmp_path, tmp_path / "loss.png", metric="train/loss", fallback=None)
    assert out.read_bytes()[:8] == PNG_MAGIC


def test_missing_metric_lists_what_was_logged(tmp_path):
    _log_run(tmp_path, "eval/return")
    with pytest.raises(ValueError, match=r"has no logged values of 'x/ret' or 'y/ret'") as info:
        plot_learning_curve(tmp_path, metric="x/ret", fallback="y/ret")
    assert str(tmp_path) in str(info.value)
    assert "['eval/return', 'train/loss']" in str(info.value)
    assert not (tmp_path / "learning_curve.png").exists()


def test_run_dir_without_metrics(tmp_path):
    with pytest.raises(FileNotFoundError, match="no metrics.csv"):
        plot_learning_curve(tmp_path)
