"""Progress a worker reports while it collects: its env steps, counted as they happen.

The driver's stall monitor (:mod:`tdscheme.collectors.driver.liveness`) reads the
count through the worker's ``progress()`` call, in its ``control`` concurrency
group, without waiting for the batch.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

__all__ = ["count_env_steps"]


def count_env_steps(collector: Any, on_steps: Callable[[int], None]) -> bool:
    """Calls ``on_steps(n)`` after each env step of a torchrl collector (``n``: env batch size).

    Wraps the collector's env's ``step_and_maybe_reset`` (the call torchrl's rollout
    makes once per step) and sets a :class:`~tdscheme.rollout.lean.LeanCollector`'s
    ``step_hook`` (its lean loop steps the gymnasium or EnvPool env directly).
    Collectors without an env in this process (multi-process ones) are left alone:
    their progress is counted per batch by the worker.

    Returns:
        Whether the steps are counted.

    Example:
        >>> from tdscheme.testing import make_env
        >>> from tdscheme.runtime.torchrl_names import Collector
        >>> steps = []
        >>> collector = Collector(make_env(), None, frames_per_batch=5, total_frames=5)
        >>> count_env_steps(collector, steps.append)
        True
        >>> _ = next(iter(collector)); sum(steps)
        5
        >>> collector.shutdown()
    """
    if hasattr(collector, "step_hook"):  # LeanCollector: its lean loop calls the hook
        collector.step_hook = on_steps
    env = getattr(collector, "env", None)
    step = getattr(env, "step_and_maybe_reset", None)
    if step is None:
        return False
    frames = max(1, int(env.batch_size.numel()))

    @functools.wraps(step)
    def counted(*args: Any, **kwargs: Any) -> Any:
        out = step(*args, **kwargs)
        on_steps(frames)
        return out

    object.__setattr__(env, "step_and_maybe_reset", counted)
    return True
