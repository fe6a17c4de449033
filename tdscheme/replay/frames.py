"""The frames a worker writes into a replay buffer: cut to a frame budget, NaN / inf left out.

Both keep torchrl's layout (what torchrl's collectors write: ``[*env_batch, time]``, or
flat whole trajectories with ``trajs_per_batch``) and cut in the units the buffer's
storage writes (env rows for ``ndim=1``, env steps for ``ndim=2``), so a buffer
configured for torchrl's ``RayCollector`` fills the same way. A trajectory is never
cut: one that does not fit, or that holds a bad frame, is left out whole.
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

from tdscheme.finite import bad_frames

__all__ = ["frames_to_write", "trajectory_lengths", "without_nonfinite"]


def trajectory_lengths(td: TensorDictBase) -> list[int]:
    """The lengths of the trajectories of a flat batch of whole trajectories (``done`` ends each).

    Example:
        >>> from tensordict import TensorDict
        >>> done = torch.tensor([False, True, False, False, True]).unsqueeze(-1)
        >>> trajectory_lengths(TensorDict({"next": {"done": done}}, [5]))
        [2, 3]
    """
    done = td.get(("next", "done")).reshape(td.shape[0], -1).any(-1)
    ends = (torch.nonzero(done).flatten() + 1).tolist()
    return [end - start for start, end in zip([0, *ends[:-1]], ends, strict=True)]


def frames_to_write(
    td: TensorDictBase, max_frames: int | None, *, whole_trajectories: bool, storage_ndim: int = 1
) -> tuple[TensorDictBase, int]:
    """The frames of a batch to write within ``max_frames``; and how many are discarded.

    The batch keeps torchrl's layout (what torchrl's collectors write: ``[*env_batch,
    time]``, or flat whole trajectories), so a buffer configured for torchrl's
    ``RayCollector`` fills the same way.

    Args:
        td: a stamped batch.
        max_frames: the request's budget (``None``: no budget).
        whole_trajectories: ``td`` is a flat batch of whole trajectories
            (``trajs_per_batch``): keep the longest prefix of whole trajectories
            that fits, never part of one. Otherwise the batch is cut so that what
            is written keeps the shape the buffer's storage holds: along its
            first dim for a storage of ``ndim=1`` (time for one env; the env rows
            of a ``[num_envs, time]`` batch), along time for ``ndim=2`` (torchrl's
            ``LazyTensorStorage(size, ndim=2)`` keeps the env dim and extends along time).
        storage_ndim: the ``ndim`` of the buffer's storage.

    Returns:
        ``(frames, discarded)``: the frames to write and the count left out.

    Example:
        >>> from tensordict import TensorDict
        >>> done = torch.tensor([False, True, False, False, True]).unsqueeze(-1)
        >>> td = TensorDict({"next": {"done": done}}, [5])
        >>> kept, discarded = frames_to_write(td, 4, whole_trajectories=True)
        >>> kept.shape, discarded
        (torch.Size([2]), 3)
        >>> batched = TensorDict({"x": torch.zeros(3, 10)}, [3, 10])  # 3 envs, 10 steps
        >>> kept, discarded = frames_to_write(batched, 25, whole_trajectories=False)
        >>> kept.shape, discarded
        (torch.Size([2, 10]), 10)
        >>> kept, discarded = frames_to_write(batched, 25, whole_trajectories=False, storage_ndim=2)
        >>> kept.shape, discarded
        (torch.Size([3, 8]), 6)
    """
    total = td.batch_size.numel()
    if max_frames is None or max_frames >= total:
        return td, 0
    keep = max(0, max_frames)
    if whole_trajectories:
        kept = 0
        for length in trajectory_lengths(td):
            if kept + length > keep:
                break
            kept += length
        return td[:kept], total - kept
    if storage_ndim >= 2 and td.ndim >= 2:  # [num_envs, time] into [time, num_envs] rows
        per_step = total // td.shape[-1]
        out = td[..., : keep // per_step]
    else:
        per_row = total // td.shape[0]  # 1 for one env's [time]; time for [num_envs, time]
        out = td[: keep // per_row]
    return out, total - out.batch_size.numel()


def without_nonfinite(
    td: TensorDictBase, *, whole_trajectories: bool, storage_ndim: int = 1
) -> tuple[TensorDictBase, int]:
    """``td`` without the frames holding NaN or inf, in the units the storage writes; and the count.

    A flat batch loses the bad frames themselves; a flat batch of whole
    trajectories loses each trajectory holding one (never a cut trajectory); a
    ``[num_envs, time]`` batch loses the env rows holding one (``storage_ndim=1``)
    or the env steps holding one (``storage_ndim=2``).

    Example:
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"r": torch.tensor([[1.0, float("nan"), 3.0], [4.0, 5.0, 6.0]])}, [2, 3])
        >>> kept, dropped = without_nonfinite(td, whole_trajectories=False)
        >>> kept["r"].tolist(), dropped
        ([[4.0, 5.0, 6.0]], 3)
        >>> kept, dropped = without_nonfinite(td, whole_trajectories=False, storage_ndim=2)
        >>> kept["r"].tolist(), dropped
        ([[1.0, 3.0], [4.0, 6.0]], 2)
    """
    bad = bad_frames(td)
    if not bool(bad.any()):
        return td, 0
    total = td.batch_size.numel()
    if td.ndim >= 2:
        keep = ~bad.any(0) if storage_ndim >= 2 else ~bad.reshape(td.shape[0], -1).any(-1)
        kept = td[..., keep] if storage_ndim >= 2 else td[keep]
    elif whole_trajectories:
        lengths = trajectory_lengths(td)
        traj = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
        bad_traj = torch.zeros(len(lengths), dtype=torch.bool).index_put_(
            (traj,), bad, accumulate=True
        )
        kept = td[~bad_traj[traj]]
    else:
        kept = td[~bad]
    return kept, total - kept.batch_size.numel()
