"""The learning curve of a run, drawn from its ``metrics.csv``.

Needs matplotlib (``pip install tdscheme[plot]``); it is imported only when a plot
is drawn, and drawn with the Agg canvas directly, so pyplot's global state and the
user's chosen backend are left alone.
"""

from __future__ import annotations

import os
from pathlib import Path

from tdscheme.engine.run_log import read_metrics


def plot_learning_curve(
    run_dir: str | os.PathLike,
    out_path: str | os.PathLike | None = None,
    *,
    metric: str = "eval/return",
    fallback: str | None = "train/episode_return",
) -> Path:
    """Plots a return (or any logged scalar) against frames and writes a PNG.

    Args:
        run_dir: A run directory written by :class:`~tdscheme.engine.run_log.RunLogger`.
        out_path: The PNG to write; defaults to ``run_dir/learning_curve.png``.
        metric: The scalar to plot.
        fallback: The scalar to plot when ``metric`` was never logged (``None`` for none).

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
    metrics = read_metrics(run_dir)
    candidates = [name for name in (metric, fallback) if name is not None]
    chosen = next((name for name in candidates if metrics.get(name)), None)
    if chosen is None:
        wanted = " or ".join(map(repr, candidates))
        raise ValueError(
            f"run_dir {str(run_dir)!r} has no logged values of {wanted}; "
            f"logged metrics: {sorted(metrics) or 'none'}"
        )
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as err:
        raise ImportError(
            "plot_learning_curve needs matplotlib; install it with `pip install matplotlib` "
            "(or `pip install tdscheme[plot]`)"
        ) from err

    points = sorted(metrics[chosen], key=lambda point: point[0])
    steps = [step for step, _ in points]
    values = [value for _, value in points]
    out = Path(out_path) if out_path is not None else Path(run_dir) / "learning_curve.png"

    out.parent.mkdir(parents=True, exist_ok=True)
    figure = Figure(figsize=(6.4, 4.0), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    axes.plot(steps, values, marker="o" if len(points) < 30 else None, markersize=3)
    axes.set_xlabel("frames")
    axes.set_ylabel(chosen)
    axes.set_title(Path(run_dir).resolve().name)
    axes.grid(alpha=0.3)
    figure.savefig(out, format="png", dpi=100)
    return out
