"""Step metrics of the gradient coordinators: timers (as RLlib reports them) and aggregation.

Every coordinator reports, per step, the mean milliseconds per event of
``wait_ms`` (blocked on workers), ``apply_ms`` (one learner update) and
``dispatch_ms`` (one weights ``ray.put`` plus the calls that send them), like
RLlib's ``AsyncGradientsOptimizer`` timers, and the frame-weighted means of the
workers' loss metrics.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from tdscheme.gradient_workers.worker import GradientResult

__all__ = ["Timer", "episode_stats", "step_metrics", "summarize_results"]


class Timer:
    """Accumulates the duration of ``with`` blocks; reports the mean in milliseconds.

    Example:
        >>> timer = Timer()
        >>> with timer:
        ...     pass
        >>> timer.count, timer.mean_ms() >= 0.0
        (1, True)
        >>> Timer().mean_ms()
        0.0
    """

    def __init__(self) -> None:
        self.count = 0
        self.total_s = 0.0
        self._start = 0.0

    def __enter__(self) -> Timer:
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.total_s += time.perf_counter() - self._start
        self.count += 1

    def mean_ms(self) -> float:
        """Mean milliseconds per block (0.0 before the first)."""
        return 1e3 * self.total_s / self.count if self.count else 0.0


def summarize_results(results: Sequence[GradientResult]) -> dict[str, float]:
    """Frame-weighted means of the workers' metrics and timings.

    Args:
        results: the gradients a step used (applied or all-reduced).

    Returns:
        Each metric key of the results (``loss``, ``loss_objective``, ``grad_norm``,
        ...) and each timing (``collect_ms``, ``compute_ms``, ...) averaged with the
        results' frame counts as weights; empty when no result has frames.

    Example:
        >>> r = lambda frames, loss: GradientResult(0, 0, frames, None, {"loss": loss},
        ...                                         [], {"collect_ms": 1.0})
        >>> summarize_results([r(100, 1.0), r(300, 2.0)])
        {'loss': 1.75, 'collect_ms': 1.0}
    """
    out: dict[str, float] = {}
    total = sum(r.frames for r in results)
    if total > 0:
        for source in ("metrics", "timings_ms"):
            keys = {key for r in results for key in getattr(r, source)}
            for key in sorted(keys):
                pairs = [
                    (getattr(r, source)[key], r.frames)
                    for r in results
                    if key in getattr(r, source)
                ]
                weight = sum(frames for _, frames in pairs)
                if weight > 0:
                    out[key] = sum(value * frames for value, frames in pairs) / weight
    return out


def episode_stats(results: Sequence[GradientResult]) -> dict[str, float]:
    """How many episodes ended in the results' batches, and their mean return.

    Args:
        results: every gradient received in a step, applied or dropped (their
            episodes were played either way).

    Returns:
        ``episodes`` and, when that is not 0, ``episode_return_mean``.

    Example:
        >>> r = lambda returns: GradientResult(0, 0, 10, None, {}, returns, {})
        >>> episode_stats([r([10.0]), r([20.0, 30.0])])
        {'episodes': 3.0, 'episode_return_mean': 20.0}
        >>> episode_stats([])
        {'episodes': 0.0}
    """
    returns = [ret for r in results for ret in r.episode_returns]
    out = {"episodes": float(len(returns))}
    if returns:
        out["episode_return_mean"] = sum(returns) / len(returns)
    return out


def step_metrics(
    applied: Sequence[GradientResult], dropped: Sequence[GradientResult], *, updates: int
) -> dict[str, float]:
    """What every coordinator step reports about the gradients it received.

    Args:
        applied: the gradients the step used (applied or all-reduced).
        dropped: the gradients it received and dropped (stale, preempted, non-finite).
        updates: the learner updates the step made.

    Returns:
        :func:`summarize_results` of ``applied``, :func:`episode_stats` of both,
        and ``frames`` (trained on), ``frames_collected``, ``frames_dropped``,
        ``grads_applied``, ``grads_dropped``, ``grads_nonfinite`` (those of the
        dropped that held NaN / inf) and ``updates``.

    Example:
        >>> r = lambda frames, bad=None: GradientResult(0, 0, frames, None, {}, [], {},
        ...                                             nonfinite=bad)
        >>> m = step_metrics([r(100)], [r(50), r(50, "non-finite loss")], updates=1)
        >>> m["frames"], m["frames_collected"], m["frames_dropped"], m["grads_dropped"]
        (100.0, 200.0, 100.0, 2.0)
        >>> m["grads_nonfinite"]
        1.0
    """
    metrics = summarize_results(applied)
    metrics.update(episode_stats([*applied, *dropped]))
    frames = sum(r.frames for r in applied)
    frames_dropped = sum(r.frames for r in dropped)
    metrics.update(
        frames=float(frames),
        frames_collected=float(frames + frames_dropped),
        frames_dropped=float(frames_dropped),
        grads_applied=float(len(applied)),
        grads_dropped=float(len(dropped)),
        grads_nonfinite=float(sum(r.nonfinite is not None for r in dropped)),
        updates=float(updates),
    )
    return metrics
