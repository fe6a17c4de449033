"""The frame ledger: where every frame asked of a worker went, and cutting the last batch to fit.

Every request the driver sends asks a worker for frames. Once it resolves, each
of those frames lands in exactly one column:

* ``yielded``: handed to the consumer (or written into the replay buffer);
* ``dropped``: collected with weights too stale (``max_policy_lag``);
* ``preempted``: not collected because a straggler was cut off;
* ``lost``: in flight on a worker that died or was declared hung;
* ``discarded``: collected past ``total_frames`` (the last batch cut to fit, or
  not written by a worker's budget), or in flight when iteration stopped.

``collected`` is the sum of the requests that resolved, so
``collected == yielded + dropped + preempted + lost + discarded`` holds after
every batch (requests still in flight are in no column yet). Each batch also
leaves a record of its provenance: worker id, incarnation, batch id, policy
version and frames.

Example:
    >>> ledger = FrameLedger()
    >>> ledger.add(yielded=150, preempted=50)
    >>> ledger.add(lost=200)
    >>> ledger.as_dict()["collected"], ledger.balanced()
    (400, True)
"""

from __future__ import annotations

import dataclasses
from collections import deque
from typing import Any, NamedTuple

import torch
from tensordict import TensorDictBase

from tdscheme.keys import MASK_KEY

#: torchrl's trajectory ids, per frame.
TRAJ_IDS_KEY = ("collector", "traj_ids")

__all__ = ["BatchRecord", "FrameLedger", "TrajectoryIds", "cut_to_fit"]

_COLUMNS = ("yielded", "dropped", "preempted", "lost", "discarded")


class BatchRecord(NamedTuple):
    """Where one worker batch came from and how many of its frames were yielded."""

    worker_id: int
    incarnation: int
    batch_id: int
    policy_version: int
    frames: int


@dataclasses.dataclass
class FrameLedger:
    """Frames by destination (see the module docstring); ``collected`` is their sum.

    Attributes:
        records: the provenance of the last ``keep`` batches (newest last).
    """

    collected: int = 0
    yielded: int = 0
    dropped: int = 0
    preempted: int = 0
    lost: int = 0
    discarded: int = 0
    keep: int = 64
    records: deque = dataclasses.field(default_factory=deque)

    def add(self, **frames: int) -> None:
        """Books the frames of one resolved request, column by column (and into ``collected``)."""
        for column, count in frames.items():
            if column not in _COLUMNS:
                raise KeyError(f"unknown ledger column {column!r}; known: {_COLUMNS}")
            setattr(self, column, getattr(self, column) + count)
            self.collected += count

    def record(self, record: BatchRecord) -> None:
        """Keeps the provenance of a yielded batch (the last ``keep`` ones)."""
        self.records.append(record)
        while len(self.records) > self.keep:
            self.records.popleft()

    def balanced(self) -> bool:
        """Whether ``collected == yielded + dropped + preempted + lost + discarded``."""
        return self.collected == sum(getattr(self, column) for column in _COLUMNS)

    def as_dict(self) -> dict[str, Any]:
        """The columns, ``collected``, ``unaccounted`` (0) and ``balanced``, as plain values."""
        out: dict[str, Any] = {"collected": self.collected}
        out.update({column: getattr(self, column) for column in _COLUMNS})
        out["unaccounted"] = self.collected - sum(getattr(self, column) for column in _COLUMNS)
        out["balanced"] = self.balanced()
        return out


def cut_to_fit(
    td: TensorDictBase, frames_left: int, *, stacked: bool = False
) -> tuple[TensorDictBase, list[int] | None]:
    """Cuts a batch along time (its last dim) so that its valid frames fit in ``frames_left``.

    A batch of ``[*env_batch, time]`` loses whole time steps from its end. A
    padded batch (with ``("collector", "mask")``) keeps exactly ``frames_left``
    valid frames: the surplus of its last step is unmasked. Without a mask and
    with an env batch, up to one step's frames less than ``frames_left`` may be
    kept (never more).

    Args:
        td: one batch (a worker's, or a stacked ``[workers, ...]`` one).
        frames_left: frames that may still be yielded.
        stacked: ``td`` stacks one rollout per worker along its first dim.

    Returns:
        The batch (unchanged when it fits) and, when it was cut, the valid frames
        kept: one count per worker for a stacked batch, one count otherwise.

    Example:
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"x": torch.arange(8).view(2, 4)}, batch_size=[2, 4])
        >>> out, kept = cut_to_fit(td, 5)
        >>> out["x"].tolist(), kept
        ([[0, 1], [4, 5]], [4])
    """
    mask = td.get(MASK_KEY, None)
    masked = mask is not None
    if mask is None:
        mask = torch.ones(td.batch_size, dtype=torch.bool)
    if int(mask.sum()) <= frames_left:
        return td, None
    steps = td.batch_size[-1]
    per_step = mask.reshape(-1, steps).movedim(-1, 0).reshape(steps, -1).sum(1).cumsum(0)
    if masked:  # whole steps until the budget is reached, the surplus of the last one unmasked
        keep = min(steps, int((per_step < frames_left).sum()) + 1) if frames_left > 0 else 0
    else:  # whole steps that fit
        keep = int((per_step <= frames_left).sum())
    kept = td[..., :keep]
    kept_mask = mask[..., :keep].clone()
    surplus = int(kept_mask.sum()) - frames_left
    if masked and surplus > 0:
        last = kept_mask[..., -1].reshape(-1)
        last[last.nonzero().flatten()[-surplus:]] = False
        kept_mask[..., -1] = last.view(kept_mask[..., -1].shape)
        kept = kept.clone(False)
        kept.set(MASK_KEY, kept_mask)
    if stacked:
        return kept, [int(part.sum()) for part in kept_mask]
    return kept, [int(kept_mask.sum())]


class TrajectoryIds:
    """Keeps a restarted worker's trajectory ids apart from its earlier incarnations'.

    A rebuilt worker's torchrl collector counts trajectories from 0 again; its
    trajectories must never be spliced with the old ones (SEED RL's rule). Each
    new incarnation's ids are shifted past the largest id the worker yielded
    before, so ids stay distinct per worker and keep increasing.

    Example:
        >>> from tensordict import TensorDict
        >>> ids = TrajectoryIds()
        >>> td = lambda v: TensorDict({TRAJ_IDS_KEY: torch.tensor(v)}, batch_size=[len(v)])
        >>> ids.shift_(td([0, 0, 1]), worker_id=0, incarnation=0)[TRAJ_IDS_KEY].tolist()
        [0, 0, 1]
        >>> ids.shift_(td([0, 1]), worker_id=0, incarnation=1)[TRAJ_IDS_KEY].tolist()
        [2, 3]
    """

    def __init__(self) -> None:
        self._largest: dict[int, int] = {}  # worker -> largest id yielded (shifted)
        self._offsets: dict[tuple[int, int], int] = {}  # (worker, incarnation) -> shift

    def shift_(self, td: TensorDictBase, worker_id: int, incarnation: int) -> TensorDictBase:
        """Shifts ``td``'s trajectory ids in place (when it has them); returns it."""
        ids = td.get(TRAJ_IDS_KEY, None)
        if ids is None or ids.numel() == 0:
            return td
        key = (worker_id, incarnation)
        if key not in self._offsets:
            self._offsets[key] = 0 if incarnation == 0 else self._largest.get(worker_id, -1) + 1
        offset = self._offsets[key]
        if offset:
            ids = torch.where(ids >= 0, ids + offset, ids)  # -1: padding, not a trajectory
            td.set(TRAJ_IDS_KEY, ids)
        self._largest[worker_id] = max(self._largest.get(worker_id, -1), int(ids.max()))
        return td
