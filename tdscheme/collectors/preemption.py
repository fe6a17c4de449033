"""Straggler cut-off for synchronous collection, and how partial rollouts are assembled."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from tensordict import TensorDictBase

from tdscheme.collectors.worker import MASK_KEY


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


def pad_time(td: TensorDictBase, length: int) -> TensorDictBase:
    """Pads ``td`` along its last (time) dim to ``length`` and marks valid frames.

    The validity mask goes to ``("collector", "mask")``; padded frames are zeros.

    Example:
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"x": torch.ones(3)}, batch_size=[3])
        >>> out = pad_time(td, 5)
        >>> out["x"].tolist(), out["collector", "mask"].tolist()
        ([1.0, 1.0, 1.0, 0.0, 0.0], [True, True, True, False, False])
    """
    steps = td.batch_size[-1]
    if steps > length:
        raise ValueError(f"pad_time: the rollout has {steps} steps, more than length={length}")
    td = td.clone(False)
    td.set(MASK_KEY, torch.ones(td.batch_size, dtype=torch.bool))
    if steps == length:
        return td
    filler = td[..., -1:].expand(*td.batch_size[:-1], length - steps).clone().zero_()
    return torch.cat([td, filler], dim=-1)


def stack_rollouts(tds: Sequence[TensorDictBase], *, masked: bool) -> TensorDictBase:
    """Stacks one rollout per worker into a ``[num_workers, ...]`` batch.

    Args:
        tds: the workers' rollouts, time last.
        masked: pad shorter (preempted) rollouts to the longest one and add
            ``("collector", "mask")``; with ``False`` all must have the same shape.
    """
    if masked:
        length = max(td.batch_size[-1] for td in tds)
        tds = [pad_time(td, length) for td in tds]
    return torch.stack(list(tds), dim=0)
