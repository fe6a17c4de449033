"""How partial rollouts of preempted workers are assembled (the thresholds: :class:`PreemptionConfig`)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDictBase

from tdscheme.keys import MASK_KEY
from tdscheme.stragglers import PreemptionConfig

__all__ = ["PreemptionConfig", "pad_time", "stack_rollouts"]


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
