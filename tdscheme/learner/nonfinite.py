"""NaN / inf in a batch, a loss or a gradient: skip the update, count it, stop after K in a row.

A :class:`~tdscheme.learner.Learner` keeps one :class:`NonFiniteGuard`. Before
training on a batch it checks every floating-point entry of the prepared batch
(observations, rewards, and what the value estimator wrote: advantages, value
targets); before each optimizer step it checks the loss terms and the gradient
norm. On a NaN or inf the update is skipped: no optimizer step is taken with it
(steps of earlier minibatches of the same update stay), the learner's version is
not bumped, so the driver does not push weights after it, and the skip is counted
in the update's metrics (``nonfinite_skipped``, ``nonfinite_skipped_total``).
After ``max_nonfinite_updates`` skipped updates in a row the run stops with a
:class:`NonFiniteUpdateError` naming what went non-finite and the workers the
batch came from (``("collector", "worker_id")``).

With ``drop_nonfinite_frames`` the frames holding a NaN or inf are dropped
instead (marked invalid in ``("collector", "mask")``, their numbers zeroed so
that they do not spread through the value estimator) and counted
(``nonfinite_frames_dropped``); the update goes on with the rest.

Example:
    >>> import torch
    >>> from tensordict import TensorDict
    >>> guard = NonFiniteGuard(max_in_a_row=2)
    >>> batch = TensorDict(reward=torch.tensor([1.0, float("inf")]), batch_size=[2])
    >>> guard.check_batch(batch)
    "non-finite values in 'reward' (1 of 2 frames)"
    >>> guard.skipped("non-finite values in 'reward'")
    >>> guard.skipped("non-finite values in 'reward'")
    Traceback (most recent call last):
    ...
    tdscheme.errors.NonFiniteUpdateError: 2 updates in a row were skipped ...
    >>> dropping = NonFiniteGuard(max_in_a_row=3, drop_frames=True)
    >>> kept, dropped = dropping.drop_frames(batch)
    >>> dropped, kept["collector", "mask"].tolist(), kept["reward"].tolist()
    (1, [True, False], [1.0, 0.0])
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch
from tensordict import TensorDictBase

from tdscheme.errors import NonFiniteUpdateError
from tdscheme.finite import bad_frames, nonfinite_advice, nonfinite_entries, nonfinite_keys
from tdscheme.keys import MASK_KEY, WORKER_ID_KEY

__all__ = ["NonFiniteGuard", "SkippedStep"]


class SkippedStep(Exception):  # noqa: N818 - a signal between two Learner methods, not an error
    """An optimizer step was not taken: its loss or gradient is not finite."""


class NonFiniteGuard:
    """Counts updates skipped for NaN / inf and frames dropped for them; stops after K in a row.

    Args:
        max_in_a_row: the ``K``-th skipped update in a row raises
            :class:`NonFiniteUpdateError`.
        drop_frames: drop the frames holding NaN / inf before training
            (:meth:`drop_frames`) instead of skipping the whole update.
    """

    def __init__(self, *, max_in_a_row: int, drop_frames: bool = False) -> None:
        self.max_in_a_row = max_in_a_row
        self.drop = drop_frames
        self.in_a_row = 0
        self.skipped_total = 0
        self.frames_dropped_total = 0

    def check_batch(self, batch: TensorDictBase) -> str | None:
        """What is non-finite in ``batch`` (keys, frames, workers), or ``None``."""
        keys = nonfinite_keys(batch)
        if not keys:
            return None
        bad = bad_frames(batch)
        return (
            f"non-finite values in {', '.join(keys)} ({int(bad.sum())} of {bad.numel()} frames)"
            + (_workers(batch, bad))
        )

    def check_step(self, metrics: Mapping[str, torch.Tensor]) -> None:
        """Raises :class:`SkippedStep` if a loss term or the gradient norm is NaN or inf."""
        bad = [name for name, value in metrics.items() if not bool(torch.isfinite(value).all())]
        if bad:
            raise SkippedStep(f"non-finite {', '.join(bad)}")

    def check_gradients(self, grads: Iterable[tuple[str, torch.Tensor]]) -> str | None:
        """What gradient entries hold NaN / inf, or ``None``."""
        bad = nonfinite_entries(grads)
        return f"non-finite gradients in {bad}" if bad else None

    def drop_frames(self, batch: TensorDictBase) -> tuple[TensorDictBase, int]:
        """Marks frames with NaN / inf invalid and zeroes their numbers; returns ``(batch, dropped)``.

        The caller's batch is not modified (a copy is made when something is dropped).
        """
        if batch.batch_dims < 1:
            return batch, 0
        bad = bad_frames(batch)
        dropped = int(bad.sum())
        if not dropped:
            return batch, 0
        out = batch.clone()
        out.apply_(
            lambda t: (
                torch.nan_to_num(t, nan=0.0, posinf=0.0, neginf=0.0) if t.is_floating_point() else t
            )
        )
        mask = out.get(MASK_KEY, None)
        mask = torch.ones_like(bad) if mask is None else mask.bool()
        out.set(MASK_KEY, mask & ~bad)
        self.frames_dropped_total += dropped
        return out, dropped

    def skipped(self, problem: str, *, source: str = "") -> None:
        """Counts a skipped update; raises on the ``max_in_a_row``-th in a row.

        Raises:
            NonFiniteUpdateError: naming ``problem`` and how to change the limit.
        """
        self.in_a_row += 1
        self.skipped_total += 1
        if self.in_a_row >= self.max_in_a_row:
            raise NonFiniteUpdateError(
                f"{self.in_a_row} updates in a row were skipped for NaN or inf; the last: "
                f"{problem}{source}. {nonfinite_advice()}"
            )

    def succeeded(self) -> None:
        """An update went through: the run of skipped ones is over."""
        self.in_a_row = 0

    def metrics(self, *, skipped: bool, dropped: int) -> dict[str, torch.Tensor]:
        """This update's counts and the totals, as float scalars."""
        return {
            "nonfinite_skipped": torch.tensor(float(skipped)),
            "nonfinite_skipped_total": torch.tensor(float(self.skipped_total)),
            "nonfinite_frames_dropped": torch.tensor(float(dropped)),
        }


def _workers(batch: TensorDictBase, bad: torch.Tensor) -> str:
    ids = batch.get(WORKER_ID_KEY, None)
    if ids is None or ids.shape != bad.shape:
        return ""
    workers = sorted({int(w) for w in ids[bad.to(ids.device)].reshape(-1).tolist()})
    return f" from worker(s) {workers}" if workers else ""


def batch_source(batch: TensorDictBase) -> str:
    """``" (batch from worker(s) [0, 1])"``: the workers whose frames are in ``batch``, or ``""``."""
    ids = batch.get(WORKER_ID_KEY, None)
    if ids is None:
        return ""
    return f" (batch from worker(s) {sorted(set(ids.reshape(-1).tolist()))})"
