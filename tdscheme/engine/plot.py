"""The learning curve (and an asynchronous run's policy lag) of a run, from its ``metrics.csv``.

Needs matplotlib (the ``plot`` extra); it is imported only when a plot
is drawn, and drawn with the Agg canvas directly, so pyplot's global state and the
user's chosen backend are left alone.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tdscheme.engine.extras import missing_plot_package
from tdscheme.engine.run_log import read_metrics
from tdscheme.scheme.metrics import LAG_HISTOGRAM_PREFIX


def plot_learning_curve(
    run_dir: str | os.PathLike,
    out_path: str | os.PathLike | None = None,
    *,
    metric: str = "eval/return",
    fallback: str | None = "train/episode_return",
    metrics: Mapping[str, list[tuple[int, float]]] | None = None,
) -> Path:
    """Plots a return (or any logged scalar) against frames and writes a PNG.

    Args:
        run_dir: A run directory written by :class:`~tdscheme.engine.run_log.RunLogger`.
        out_path: The PNG to write; defaults to ``run_dir/learning_curve.png``.
        metric: The scalar to plot.
        fallback: The scalar to plot when ``metric`` was never logged (``None`` for none).
        metrics: the run's metrics already read (:func:`read_metrics`); ``None`` reads them.

    Returns:
        The path of the PNG.

    Raises:
        FileNotFoundError: If ``run_dir`` has no ``metrics.csv``.
        ValueError: If neither ``metric`` nor ``fallback`` was logged in ``run_dir``; the
            message lists the metrics that were.
        ImportError: If matplotlib is not installed.

    Example:
        >>> import tempfile
        >>> from tdscheme.engine.run_log import RunLogger
        >>> with tempfile.TemporaryDirectory() as run_dir:
        ...     with RunLogger(run_dir) as run_log:
        ...         for step in (100, 200):
        ...             run_log.log_scalars({"eval/return": step / 10}, step=step)
        ...     plot_learning_curve(run_dir).name
        'learning_curve.png'
    """
    metrics = read_metrics(run_dir) if metrics is None else metrics
    candidates = [name for name in (metric, fallback) if name is not None]
    chosen = next((name for name in candidates if metrics.get(name)), None)
    if chosen is None:
        wanted = " or ".join(map(repr, candidates))
        raise ValueError(
            f"run_dir {str(run_dir)!r} has no logged values of {wanted}; "
            f"logged metrics: {sorted(metrics) or 'none'}"
        )
    figure = _figure("plot_learning_curve", (6.4, 4.0))
    steps, values = _series(metrics[chosen])
    axes = figure.add_subplot()
    axes.plot(steps, values, marker="o" if len(steps) < 30 else None, markersize=3)
    axes.set_xlabel("frames")
    axes.set_ylabel(chosen)
    axes.set_title(Path(run_dir).resolve().name)
    axes.grid(alpha=0.3)
    return _save(figure, out_path, Path(run_dir) / "learning_curve.png")


def plot_throughput(
    run_dir: str | os.PathLike,
    out_path: str | os.PathLike | None = None,
    *,
    metrics: Mapping[str, list[tuple[int, float]]] | None = None,
) -> Path:
    """Plots the run's frames per second against frames and writes a PNG.

    Draws ``fps`` (frames trained on per second since the run started) and, when
    logged, ``collector/fps`` (the collectors' own rate).

    Args:
        run_dir: A run directory written by :class:`~tdscheme.engine.run_log.RunLogger`.
        out_path: The PNG to write; defaults to ``run_dir/throughput.png``.
        metrics: the run's metrics already read (:func:`read_metrics`); ``None`` reads them.

    Returns:
        The path of the PNG.

    Raises:
        ValueError: If the run logged no ``fps``.

    Example:
        >>> import tempfile
        >>> metrics = {"fps": [(4096, 900.0)], "collector/fps": [(4096, 1000.0)]}
        >>> with tempfile.TemporaryDirectory() as run_dir:
        ...     plot_throughput(run_dir, metrics=metrics).name
        'throughput.png'
    """
    metrics = read_metrics(run_dir) if metrics is None else metrics
    if not metrics.get("fps"):
        raise ValueError(f"run_dir {str(run_dir)!r} has no logged fps")
    figure = _figure("plot_throughput", (6.4, 4.0))
    axes = figure.add_subplot()
    for name, label in (("fps", "trained (fps)"), ("collector/fps", "collected (collector/fps)")):
        if metrics.get(name):
            axes.plot(*_series(metrics[name]), label=label)
    axes.set_xlabel("frames")
    axes.set_ylabel("frames per second")
    axes.set_title(f"{Path(run_dir).resolve().name}: throughput")
    axes.legend(loc="lower right", fontsize="small")
    axes.grid(alpha=0.3)
    return _save(figure, out_path, Path(run_dir) / "throughput.png")


def has_lag_histogram(metrics: Mapping[str, object]) -> bool:
    """Whether a run's metrics (:func:`read_metrics`) hold the policy-lag histogram (async runs)."""
    return any(name.startswith(LAG_HISTOGRAM_PREFIX) for name in metrics)


def plot_policy_lag(
    run_dir: str | os.PathLike,
    out_path: str | os.PathLike | None = None,
    *,
    metrics: Mapping[str, list[tuple[int, float]]] | None = None,
) -> Path:
    """Plots the policy lag of the frames trained on against frames and writes a PNG.

    The top panel stacks the histogram's fractions (``policy_lag/hist/<lag>``, logged
    by the :class:`~tdscheme.scheme.async_loop.AsyncLoop`); the bottom one draws
    ``policy_lag/min``, ``/mean`` and ``/max``.

    Args:
        run_dir: A run directory written by :class:`~tdscheme.engine.run_log.RunLogger`.
        out_path: The PNG to write; defaults to ``run_dir/policy_lag.png``.
        metrics: the run's metrics already read (:func:`read_metrics`); ``None`` reads them.

    Returns:
        The path of the PNG.

    Raises:
        FileNotFoundError: If ``run_dir`` has no ``metrics.csv``.
        ValueError: If the run logged no lag histogram.
        ImportError: If matplotlib is not installed.

    Example:
        >>> import tempfile
        >>> lag = {"policy_lag/hist/0": [(100, 0.25), (200, 0.5)],
        ...        "policy_lag/hist/1+": [(100, 0.75), (200, 0.5)], "policy_lag/mean": [(100, 0.75)]}
        >>> with tempfile.TemporaryDirectory() as run_dir:
        ...     plot_policy_lag(run_dir, metrics=lag).name
        'policy_lag.png'
    """
    metrics = read_metrics(run_dir) if metrics is None else metrics
    buckets = sorted(
        (name for name in metrics if name.startswith(LAG_HISTOGRAM_PREFIX)),
        key=lambda name: int(name[len(LAG_HISTOGRAM_PREFIX) :].rstrip("+")),
    )
    if not buckets:
        raise ValueError(
            f"run_dir {str(run_dir)!r} has no logged policy-lag histogram "
            f"({LAG_HISTOGRAM_PREFIX}<lag>: runs with async_learner=True log it)"
        )
    figure = _figure("plot_policy_lag", (6.4, 6.0))
    top, bottom = figure.subplots(2, 1, sharex=True)
    steps, _ = _series(metrics[buckets[0]])
    fractions = [_series(metrics[name])[1] for name in buckets]
    labels = [f"lag {name[len(LAG_HISTOGRAM_PREFIX) :]}" for name in buckets]
    top.stackplot(steps, fractions, labels=labels)
    top.set_ylabel("fraction of frames")
    top.set_ylim(0, 1)
    top.legend(loc="upper left", fontsize="small", ncol=4)
    top.set_title(f"{Path(run_dir).resolve().name}: policy lag (weight pushes)")
    for stat in ("max", "mean", "min"):
        if metrics.get(f"policy_lag/{stat}"):
            bottom.plot(*_series(metrics[f"policy_lag/{stat}"]), label=stat)
    bottom.set_xlabel("frames")
    bottom.set_ylabel("policy lag")
    bottom.legend(loc="upper left", fontsize="small")
    bottom.grid(alpha=0.3)
    return _save(figure, out_path, Path(run_dir) / "policy_lag.png")


def plot_checkpoint_scores(
    run_dir: str | os.PathLike, out_path: str | os.PathLike | None = None
) -> Path:
    """Plots ``run_dir/eval.csv`` (test mode: each checkpoint's mean return and std) as a PNG.

    Args:
        run_dir: A run directory holding ``eval.csv`` (``tdscheme eval RUN_DIR``).
        out_path: The PNG; defaults to ``run_dir/eval_checkpoints.png``.

    Returns:
        The path of the PNG.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as run_dir:
        ...     _ = (Path(run_dir) / "eval.csv").write_text(
        ...         "frames,checkpoint,mean_return,std_return,episodes\\n1,a.pt,2.0,1.0,2\\n")
        ...     plot_checkpoint_scores(run_dir).name
        'eval_checkpoints.png'
    """
    import csv

    with open(Path(run_dir) / "eval.csv", newline="") as f:
        rows = [(int(r["frames"]), float(r["mean_return"]), float(r["std_return"]))
                for r in csv.DictReader(f)]  # fmt: skip
    rows.sort()
    figure = _figure("plot_checkpoint_scores", (6.4, 4.0))
    axes = figure.add_subplot()
    frames = [r[0] for r in rows]
    axes.errorbar(frames, [r[1] for r in rows], yerr=[r[2] for r in rows], marker="o", capsize=3)
    axes.set_xlabel("frames")
    axes.set_ylabel("mean return (± std) per checkpoint")
    axes.set_title(f"{Path(run_dir).resolve().name}: checkpoints")
    axes.grid(alpha=0.3)
    return _save(figure, out_path, Path(run_dir) / "eval_checkpoints.png")


def _figure(caller: str, size: tuple[float, float]) -> Any:
    """A matplotlib Figure on the Agg canvas (pyplot's global state left alone)."""
    missing = missing_plot_package(caller)
    if missing is not None:
        raise missing
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=size, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _series(points: list[tuple[int, float]]) -> tuple[list[int], list[float]]:
    ordered = sorted(points, key=lambda point: point[0])
    return [step for step, _ in ordered], [value for _, value in ordered]


def _save(figure: Any, out_path: str | os.PathLike | None, default: Path) -> Path:
    out = Path(out_path) if out_path is not None else default
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, format="png", dpi=100)
    return out
