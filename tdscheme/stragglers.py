"""Stragglers: when a synchronous step stops waiting for the slowest workers, and the sync rules.

:class:`PreemptionConfig` is shared by synchronous collection (a stacked batch
cuts stragglers off at their next env step) and synchronous gradient workers (a
step goes on without a straggler's gradient). :func:`check_sync_rules` holds the
rules of stacked collection, shared by every config that sets them
(:class:`~tdscheme.collectors.RayCollectorConfig`, :class:`~tdscheme.SchemeConfig`);
the command checks a run's settings with them before it imports torch or starts Ray
(no torch here).

Example:
    >>> check_sync_rules(frames_per_batch=100, num_collectors=3, sync=True,
    ...                  preemption=PreemptionConfig())
    Traceback (most recent call last):
    ...
    ValueError: frames_per_batch=100 is invalid with sync=True and num_collectors=3; accepted: a multiple of num_collectors (each worker collects frames_per_batch / num_collectors); pick a multiple of 3
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from tdscheme.validation import invalid

__all__ = ["PreemptionConfig", "check_sync_rules"]


@dataclasses.dataclass(frozen=True)
class PreemptionConfig:
    """When a synchronous batch stops waiting for the slowest workers.

    Once at least ``fraction_workers`` of the workers have finished and at
    least ``fraction_samples`` of the batch's frames are in (counting finished
    workers), the remaining workers are cut off at their next env step and
    their partial data is kept. Both default to 1.0, which turns preemption
    off; to turn it on, set both below 1.0 (with either at 1.0 no cut can happen).

    Args:
        fraction_workers: in (0, 1].
        fraction_samples: in (0, 1].

    Example:
        >>> cfg = PreemptionConfig.from_arg({"fraction_workers": 0.5, "fraction_samples": 0.5})
        >>> cfg.enabled, cfg.should_cut(finished=1, workers=2, frames=500, frames_per_batch=1000)
        (True, True)
    """

    fraction_workers: float = 1.0
    fraction_samples: float = 1.0

    def __post_init__(self) -> None:
        for name in ("fraction_workers", "fraction_samples"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not (0.0 < value <= 1.0)
            ):
                raise ValueError(f"preemption[{name!r}]={value!r} must be a number in (0, 1]")
        if self.enabled and 1.0 in (self.fraction_workers, self.fraction_samples):
            raise ValueError(
                f"preemption={{'fraction_workers': {self.fraction_workers}, 'fraction_samples': "
                f"{self.fraction_samples}}} can never cut a worker off: a cut needs both "
                f"thresholds met while some worker is unfinished, so set both below 1.0"
            )

    @classmethod
    def from_arg(cls, preemption: Mapping[str, Any] | PreemptionConfig | None) -> PreemptionConfig:
        """Builds the config from the ``preemption`` argument of RayCollector.

        Raises:
            TypeError: ``preemption`` is not a dict, a PreemptionConfig or None.
            ValueError: unknown keys or fractions outside (0, 1].
        """
        if preemption is None:
            return cls()
        if isinstance(preemption, PreemptionConfig):
            return preemption
        if not isinstance(preemption, Mapping):
            raise TypeError(
                f"preemption must be a dict like {{'fraction_workers': 0.5, 'fraction_samples': "
                f"0.8}} or None, got {preemption!r}"
            )
        unknown = set(preemption) - {"fraction_workers", "fraction_samples"}
        if unknown:
            raise ValueError(
                f"preemption has unknown keys {sorted(unknown)}; accepted: "
                f"'fraction_workers', 'fraction_samples'"
            )
        return cls(**preemption)

    @property
    def enabled(self) -> bool:
        """Whether stragglers are ever cut off."""
        return self.fraction_workers < 1.0 or self.fraction_samples < 1.0

    def should_cut(
        self, *, finished: int, workers: int, frames: int, frames_per_batch: int
    ) -> bool:
        """Whether the unfinished workers should be cut off now."""
        return (
            self.enabled
            and finished < workers
            and finished >= self.fraction_workers * workers
            and frames >= self.fraction_samples * frames_per_batch
        )


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
