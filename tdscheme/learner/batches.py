"""From a collected batch to minibatches: value estimator, validity mask, flatten, shuffle.

Collectors hand out frames shaped ``[T]``, ``[N, T]`` or, stacked over workers,
``[W, N, T]``, time last. Advantage estimators such as GAE need that time
dimension, so they run first; only then are padded frames dropped and the batch
flattened to ``[num_frames]`` for minibatching.

Example:
    >>> import torch
    >>> from tensordict import TensorDict
    >>> batch = TensorDict(x=torch.arange(6.0).reshape(2, 3), batch_size=[2, 3])
    >>> batch[MASK_KEY] = torch.tensor([[True, True, False], [True, False, False]])
    >>> flat = prepare_batch(batch)
    >>> flat["x"].tolist()
    [0.0, 1.0, 3.0]
    >>> [mb["x"].tolist() for mb in minibatches(flat, size=2, shuffle=False)]
    [[0.0, 1.0], [3.0]]
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from tensordict import TensorDictBase

from tdscheme.keys import MASK_KEY

__all__ = ["MASK_KEY", "cut_before_padding", "minibatches", "prepare_batch"]

#: The boolean validity mask torchrl collectors write into padded (split) trajectories.


def prepare_batch(
    batch: TensorDictBase,
    *,
    value_estimator: Callable[[TensorDictBase], TensorDictBase] | None = None,
    device: str | torch.device | None = None,
) -> TensorDictBase:
    """Runs the value estimator, drops masked-out frames and flattens the batch.

    The caller's batch is never written to: the estimator writes into a shallow
    copy (or into the copy on ``device``).

    Args:
        batch: frames with at least one batch dimension, time last.
        value_estimator: run without gradients on the batch as collected, e.g.
            torchrl's ``GAE``; ``None`` skips it.
        device: where the result lives (``None``: where the batch is).

    Returns:
        A 1-D TensorDict of the valid frames.

    Raises:
        TypeError: ``batch`` is not a TensorDict.
        ValueError: ``batch`` has no batch dimension, its ``("collector", "mask")``
            does not have the batch shape, or no frame is valid.
    """
    if not isinstance(batch, TensorDictBase):
        raise TypeError(f"batch must be a TensorDict, got {type(batch).__name__}")
    if batch.batch_dims < 1:
        raise ValueError(
            f"batch must have at least one batch dimension (time), got batch_size "
            f"{tuple(batch.batch_size)}"
        )
    mask = batch.get(MASK_KEY, None)
    if mask is not None and mask.shape != batch.shape:  # before the estimator reads it
        raise ValueError(
            f"batch[{MASK_KEY}] must have the batch shape {tuple(batch.shape)}, "
            f"got {tuple(mask.shape)}"
        )
    moved = batch if device is None else batch.to(device)
    batch = moved.copy() if moved is batch else moved
    if value_estimator is not None:
        with torch.no_grad():
            batch = value_estimator(cut_before_padding(batch))
    mask = batch.get(MASK_KEY, None)
    if mask is not None:
        batch = batch[mask.bool()]
    if batch.batch_size.numel() == 0:  # TensorDict.numel() is never 0
        raise ValueError(f"batch has no valid frame (batch_size {tuple(batch.shape)})")
    return batch.reshape(-1)


def cut_before_padding(batch: TensorDictBase) -> TensorDictBase:
    """Ends each row's trajectory at a valid frame followed by padding, for the estimator.

    A padded row (a preempted rollout, a frame dropped for NaN / inf) has masked
    frames after valid ones; a recursive estimator (GAE, V-trace) would carry the
    padding's made-up advantages back into the last valid frame. Marked ``done`` and
    ``truncated`` there (``terminated`` untouched), the frame bootstraps from its own
    next observation, as at the end of a row. Returns ``batch`` itself when nothing is
    cut, else a shallow copy with new ``("next", "done")`` / ``("next", "truncated")``.

    Example:
        >>> from tensordict import TensorDict
        >>> td = TensorDict({("next", "done"): torch.zeros(1, 4, 1, dtype=torch.bool)}, [1, 4])
        >>> td[MASK_KEY] = torch.tensor([[True, True, False, False]])
        >>> cut_before_padding(td)["next", "done"].squeeze(-1).tolist()
        [[False, True, False, False]]
    """
    mask = batch.get(MASK_KEY, None)
    if mask is None or batch.batch_dims < 1:
        return batch
    mask = mask.bool()
    cut = torch.zeros_like(mask)
    cut[..., :-1] = mask[..., :-1] & ~mask[..., 1:]
    if not cut.any():
        return batch
    batch = batch.copy()
    for key in (("next", "done"), ("next", "truncated")):
        flag = batch.get(key, None)
        if flag is not None:
            where = cut.reshape(cut.shape + (1,) * (flag.ndim - cut.ndim))
            batch.set(key, flag | where)
    return batch


def minibatches(
    flat: TensorDictBase, *, size: int | None, shuffle: bool
) -> Iterator[TensorDictBase]:
    """Splits a 1-D batch into minibatches of ``size`` frames, the last one smaller.

    Args:
        flat: a 1-D TensorDict.
        size: frames per minibatch; ``None`` or more than the batch: the whole batch.
        shuffle: draw the frames in a random order (skipped for a single minibatch).

    Yields:
        ``ceil(len(flat) / size)`` TensorDicts.
    """
    num_frames = flat.shape[0]
    size = num_frames if size is None else min(size, num_frames)
    order = None
    if shuffle and size < num_frames:
        order = torch.randperm(num_frames, device=flat.device)
    for start in range(0, num_frames, size):
        if order is None:
            yield flat[start : start + size]
        else:
            yield flat[order[start : start + size]]
