"""FrameBudget: ``total_frames`` on the driver: what is left, what a request may write, the last cut.

No frame past ``total_frames`` is asked of a worker: a request is only sent while
the frames yielded and those promised to the requests in flight are under it; a
worker that writes into a replay buffer gets what is left as its request's budget;
the batch that would pass it is cut along time (:func:`cut_to_fit`; a batch of
whole trajectories keeps those that fit, :func:`cut_trajectories`). Once a
cut (or a budget too small for a whole row or trajectory) ends the budget short of
``total_frames``, it is closed, with the reason: nothing more is asked until
``set_total_frames`` reopens it.

Whole trajectories (``trajs_per_batch``) have no size known in advance: the
requests in flight share what is left, until a reply could not write a
trajectory within its share. From then on one request at a time gets all that is
left; one that writes nothing closes the budget. So a run of whole trajectories
ends within one trajectory of ``total_frames``, and always ends.

An iteration that ends short of ``total_frames`` without such a reason (and
without being stopped) is a fault: :meth:`FrameBudget.check_end` books it in the
ledger (which is then not balanced) and raises.

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

import numpy as np
import torch
from tensordict import TensorDictBase

from tdscheme.collectors.driver.ledger import FrameLedger
from tdscheme.keys import MASK_KEY
from tdscheme.validation import check_frame_budget

__all__ = ["FrameBudget", "cut_to_fit", "cut_trajectories"]


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
        #: why the budget ended short of ``total_frames`` (``None``: open)
        self.closed_reason: str | None = None
        #: whole trajectories: a reply did not fit its share; one request at a time now
        self.endgame = False

    @property
    def closed(self) -> bool:
        """Whether the last batch (or a reply) ended the budget short of ``total_frames``."""
        return self.closed_reason is not None

    def close(self, reason: str) -> None:
        """Closes the budget short of ``total_frames`` for ``reason`` (kept: the first one)."""
        if self.closed_reason is None:
            self.closed_reason = reason

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

    def set_total_frames(self, total_frames: int) -> None:
        """Changes the frame budget (the constructor's ``total_frames``) of this collector.

        It counts every frame yielded (or written) since construction, or since the state loaded
        with ``load_state_dict``; it may be changed while iterating: the batch that would pass
        it is cut to fit, as at construction. A replay-buffer request already sent keeps its budget.

        Args:
            total_frames: an int >= 0, or -1 for no limit.

        Raises:
            ValueError: ``total_frames`` is neither.
        """
        check_frame_budget("total_frames", total_frames)
        self.config.total_frames = total_frames
        self.closed_reason = None  # reopened
        self.endgame = False

    def wanted(self, in_flight: int) -> bool:
        """Whether frames beyond those yielded and ``in_flight`` (promised) are still wanted."""
        if self.closed:
            return False
        if self.endgame and in_flight > 0:
            return False  # one request at a time, with all that is left
        total = self.config.total_frames
        return total < 0 or self.ledger.yielded + in_flight < total

    def for_request(self, frames: int, *, promised: int, workers: int) -> int | None:
        """The frame budget of a request that writes into a replay buffer (``None``: unbounded).

        What ``total_frames`` leaves after the frames written and those ``promised``
        to the requests in flight; a batch of whole trajectories has no fixed size,
        so such a request gets its share of what is left over ``workers`` (all of
        it once a trajectory did not fit a share: see the module docstring).
        """
        if self.config.replay_buffer is None or self.config.total_frames < 0:
            return None
        left = self.config.total_frames - self.ledger.yielded - promised
        if self.config.trajs_per_batch is None:
            return max(0, min(frames, left))
        return max(0, left if self.endgame else left // max(1, workers))

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
        whole = self.config.trajs_per_batch is not None and MASK_KEY in batch.keys(True)
        cut = cut_trajectories if whole else cut_to_fit
        batch, kept = cut(batch, left, stacked=stacked)
        if kept is None:
            return batch, None
        unit = "trajectories" if whole else "env steps"
        self.close(f"the last batch was cut to whole {unit} ({sum(kept)} frames kept)")
        return (None if sum(kept) == 0 else batch), kept

    def reply_short(self, budget: int, full: int, *, written: int) -> None:
        """A reply fit ``written`` frames in its ``budget`` and discarded the rest.

        A request under a whole batch (``full`` frames) that could not fill its
        budget: the rest fits no whole env row (rows are all one size), so nothing
        more fits. Whole trajectories: a reply that wrote nothing though its
        budget held all that is left closes the budget; any other starts the
        endgame (one request at a time, with all that is left).
        """
        if self.config.trajs_per_batch is None:
            if budget < full and written < budget:
                self.close(
                    f"a request's budget of {budget} frames holds no more whole env rows (or steps)"
                )
            return
        left = self.config.total_frames - self.ledger.yielded
        if written == 0 and budget >= left:
            self.close(f"the next whole trajectory is longer than the {left} frames left")
        else:
            self.endgame = True

    def check_end(self, *, stopped: bool) -> None:
        """Books how an iteration ended against ``total_frames`` (see the module docstring).

        Raises:
            RuntimeError: it ended short of ``total_frames``, neither stopped nor closed.
        """
        total = self.config.total_frames
        if stopped or total < 0:
            return
        short = max(0, total - self.ledger.yielded)
        self.ledger.end_short(short, self.closed_reason if short else None)
        if short and self.closed_reason is None:
            raise RuntimeError(
                f"collection ended at {self.ledger.yielded} of total_frames={total} frames with "
                f"no request in flight and no reason to stop; {short} frames were never asked "
                f"(a bug: the ledger is {self.ledger.as_dict()})"
            )


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
    # numpy's count: a tenth of torch's sum of a batch's few thousand flags
    valid = int(np.count_nonzero(mask.numpy(force=True))) if masked else td.batch_size.numel()
    if valid <= frames_left:
        return td, None
    if mask is None:
        mask = torch.ones(td.batch_size, dtype=torch.bool)
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


def cut_trajectories(
    td: TensorDictBase, frames_left: int, *, stacked: bool = False
) -> tuple[TensorDictBase, list[int] | None]:
    """Keeps the whole trajectories of a batch that fit in ``frames_left``, in order.

    ``td`` holds padded trajectories (torchrl's ``trajs_per_batch``): ``[*workers,
    trajectories, time]`` with ``("collector", "mask")``. Trajectories are taken in
    order (worker by worker when ``stacked``) until the next one does not fit; the
    ones after it are dropped (unmasked and zeroed, like padding, in a stacked batch).

    Returns:
        As :func:`cut_to_fit`: the batch, and the valid frames kept (per worker when
        ``stacked``), or ``None`` when it fits whole.

    Example:
        >>> from tensordict import TensorDict
        >>> mask = torch.tensor([[True, True, True], [True, False, False], [True, True, False]])
        >>> td = TensorDict({"collector": {"mask": mask}}, batch_size=[3, 3])
        >>> out, kept = cut_trajectories(td, 5)
        >>> out.batch_size, kept
        (torch.Size([2, 3]), [4])
    """
    mask = td.get(MASK_KEY)
    lengths = mask.sum(-1)
    if int(lengths.sum()) <= frames_left:
        return td, None
    fits = (lengths.reshape(-1).cumsum(0) <= frames_left).view(lengths.shape)
    kept = (lengths * fits).reshape(lengths.shape[0], -1).sum(-1) if stacked else None
    if not stacked:
        return td[: int(fits.sum())], [int((lengths * fits).sum())]
    drop = (~fits).unsqueeze(-1).expand(mask.shape)
    return td.masked_fill(drop, 0), [int(k) for k in kept]
