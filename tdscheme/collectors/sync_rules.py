"""The rules of stacked collection, shared by every config that sets them (no torch here).

:class:`~tdscheme.collectors.RayCollectorConfig` and :class:`~tdscheme.SchemeConfig`
check their settings with it; the command checks a run's settings before it
imports torch or starts Ray.

Example:
    >>> from tdscheme.runtime.preemption import PreemptionConfig
    >>> check_sync_rules(frames_per_batch=100, num_collectors=3, sync=True,
    ...                  preemption=PreemptionConfig())
    Traceback (most recent call last):
    ...
    ValueError: frames_per_batch=100 is invalid with sync=True and num_collectors=3; accepted: a multiple of num_collectors (each worker collects frames_per_batch / num_collectors); pick a multiple of 3
"""

from __future__ import annotations

import dataclasses

from tdscheme.runtime.preemption import PreemptionConfig
from tdscheme.validation import invalid

__all__ = ["check_sync_rules"]


def check_sync_rules(
    *, frames_per_batch: int, num_collectors: int, sync: bool, preemption: PreemptionConfig
) -> None:
    """The rules of stacked (``sync=True``) collection, shared by every config that sets them.

    Raises:
        ValueError: a batch that does not split evenly over the workers, or
            preemption without ``sync=True``.
    """
    if sync and frames_per_batch % num_collectors:
        raise invalid(
            "frames_per_batch", frames_per_batch,
            f"a multiple of num_collectors (each worker collects frames_per_batch / "
            f"num_collectors); pick a multiple of {num_collectors}",
            context=f"sync=True and num_collectors={num_collectors}",
        )  # fmt: skip
    if preemption.enabled and not sync:
        raise invalid(
            "preemption", dataclasses.asdict(preemption),
            "None, or set sync=True (stragglers are only cut off when a batch waits for "
            "every worker)",
            context="sync=False",
        )  # fmt: skip
