"""FrameBudget: ``total_frames`` on the driver: what is left, what a request may write, the last cut.

No frame past ``total_frames`` is asked of a worker: a request is only sent while
the frames yielded and those promised to the requests in flight are under it; a
worker that writes into a replay buffer gets what is left as its request's budget;
the batch that would pass it is cut along time (:func:`cut_to_fit`). Once a
cut (or a budget too small for a whole row or trajectory) ends the budget short of
``total_frames``, it is closed: nothing more is asked until ``set_total_frames``
reopens it.

Example:
    >>> from tdscheme.collectors.driver.ledger import FrameLedger
    >>> class Settings:
    ...     total_frames, replay_buffer, trajs_per_batch = 100, object(), None
    >>> ledger = FrameLedger()
    >>> budget = FrameBudget(Settings(), ledger)
    >>> budget.left(), budget.wanted(in_flight=60), budget.for_request(64, promised=60, workers=2)
    (100, True, 40)
    >>> ledger.reset_(yielded=100)
    >>> budget.done(), budget.left(), budget.wanted(in_flight=0)
    (True, 0, False)
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase

from tdscheme.collectors.driver.ledger import FrameLedger
from tdscheme.keys import MASK_KEY

__all__ = ["FrameBudget", "cut_to_fit"]


class FrameBudget:
    """The frame budget of a collector's iterations (see the module docstring).

    Args:
        config: the collector's settings (``total_frames``, ``replay_buffer``,
            ``trajs_per_batch``); ``total_frames`` is read at each call, so a
            change by ``set_total_frames`` applies at once.
        ledger: the frame ledger, whose ``yielded`` column counts the frames spent.
    """

    def __init__(self, config: Any, ledger: FrameLedger) -> None:
        self.config = config
        self.ledger = ledger
        #: set when the last batch ended the budget short of ``total_frames``
        self.closed = False

    def done(self) -> bool:
        """Whether ``total_frames`` frames were yielded (or written)."""
        total = self.config.total_frames
        return total >= 0 and self.ledger.yielded >= total

    def left(self) -> int | None:
        """Frames that may still be yielded (or written); ``None`` without a budget.

        0 once the budget is spent, also when the last batch was cut short of it
        (an env batch keeps whole steps; a replay write keeps whole rows).
        """
        total = self.config.total_frames
        if total < 0:
            return None
        return 0 if self.closed else max(0, total - self.ledger.yielded)

    def reopen(self) -> None:
        """Reopens the budget after ``total_frames`` changed (``set_total_frames``)."""
        self.closed = False

    def wanted(self, in_flight: int) -> bool:
        """Whether frames beyond those yielded and ``in_flight`` (promised) are still wanted."""
        if self.closed:
            return False
        total = self.config.total_frames
        return total < 0 or self.ledger.yielded + in_flight < total

    def for_request(self, frames: int, *, promised: int, workers: int) -> int | None:
        """The frame budget of a request that writes into a replay buffer (``None``: unbounded).

        What ``total_frames`` leaves after the frames written and those ``promised``
        to the requests in flight; a batch of whole trajectories has no fixed size,
        so such a request gets its share of what is left over ``workers``.
        """
        if self.config.replay_buffer is None or self.config.total_frames < 0:
            return None
        left = self.config.total_frames - self.ledger.yielded - promised
        if self.config.trajs_per_batch is None:
            return max(0, min(frames, left))
        return max(0, left // max(1, workers))

    def cut(
        self, batch: TensorDictBase, *, stacked: bool
    ) -> tuple[TensorDictBase | None, list[int] | None]:
        """Cuts ``batch`` along time to what is left; closes the budget when it cut.

        Returns:
            ``(batch, kept)``: ``kept`` is each part's frames after the cut (``None``:
            nothing was cut); ``batch`` is ``None`` when nothing of it fits.
        """
        if self.config.total_frames < 0:
            return batch, None
        left = max(0, self.config.total_frames - self.ledger.yielded)
        batch, kept = cut_to_fit(batch, left, stacked=stacked)
        if kept is None:
            return batch, None
        self.closed = True
        return (None if sum(kept) == 0 else batch), kept

    def reply_short(self, budget: int, full: int) -> None:
        """A reply discarded frames past its ``budget``: under a ``full`` batch, nothing more fits."""
        self.closed = self.closed or budget < full


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
