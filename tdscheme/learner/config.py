"""``LearnerConfig``: how a Learner turns a batch into optimizer steps (checked without torch)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tdscheme.validation import check_bool, check_int

if TYPE_CHECKING:
    import torch

__all__ = ["TARGET_UPDATES", "LearnerConfig"]

#: The accepted kinds of target update: Polyak averaging every step, or a copy every N steps.
TARGET_UPDATES = ("soft", "hard")


@dataclass
class LearnerConfig:
    """How a :class:`~tdscheme.learner.Learner` turns a batch into optimizer steps.

    Args:
        num_epochs: passes over each batch per ``Learner.update``; ``>= 1``.
        minibatch_size: frames per optimizer step; ``None`` uses the whole batch as
            one minibatch, and so does a value larger than the batch. The last
            minibatch of an epoch holds the remainder, so an epoch takes
            ``ceil(num_frames / minibatch_size)`` steps.
        max_grad_norm: clip the total gradient norm to this value (``> 0``);
            ``None`` does not clip.
        lr: learning rate of the Adam optimizer the Learner builds when it is given
            no optimizer; ``> 0``.
        shuffle: draw minibatches in a fresh random order every epoch (ignored
            when one minibatch holds the whole batch).
        device: where the loss module, its optimizer and the batches live, e.g.
            ``"cpu"`` or ``"cuda"``.
        max_nonfinite_updates: an update whose batch, loss or gradient holds NaN or
            inf is skipped and counted; this many skipped in a row stop the run
            with an error naming what went non-finite and from which workers
            (:mod:`tdscheme.learner.nonfinite`); ``>= 1``.
        drop_nonfinite_frames: drop (and count) the frames holding NaN or inf
            before training instead of skipping the whole update.

    Raises:
        ValueError: a value out of the ranges above, or a string that names no
            torch device.

    Example:
        >>> LearnerConfig(num_epochs=4, minibatch_size=64, max_grad_norm=0.5).num_epochs
        4
        >>> LearnerConfig(num_epochs=0)
        Traceback (most recent call last):
        ...
        ValueError: num_epochs must be an int >= 1, got 0
    """

    num_epochs: int = 1
    minibatch_size: int | None = None
    max_grad_norm: float | None = None
    lr: float = 3e-4
    shuffle: bool = True
    device: str | torch.device = "cpu"
    max_nonfinite_updates: int = 3
    drop_nonfinite_frames: bool = False

    def __post_init__(self) -> None:
        check_int("max_nonfinite_updates", self.max_nonfinite_updates, minimum=1)
        check_bool("drop_nonfinite_frames", self.drop_nonfinite_frames)
        check_bool("shuffle", self.shuffle)
        if not _is_int(self.num_epochs) or self.num_epochs < 1:
            raise ValueError(f"num_epochs must be an int >= 1, got {self.num_epochs!r}")
        if self.minibatch_size is not None and (
            not _is_int(self.minibatch_size) or self.minibatch_size < 1
        ):
            raise ValueError(
                f"minibatch_size must be None (whole batch) or an int >= 1, "
                f"got {self.minibatch_size!r}"
            )
        if self.max_grad_norm is not None and not _is_positive(self.max_grad_norm):
            raise ValueError(
                f"max_grad_norm must be None (no clipping) or a finite number > 0, "
                f"got {self.max_grad_norm!r}"
            )
        if not _is_positive(self.lr):
            raise ValueError(f"lr must be a finite number > 0, got {self.lr!r}")
        import torch  # only here: the config module stays importable without torch

        try:
            torch.device(self.device)
        except (RuntimeError, TypeError) as err:
            raise ValueError(
                f"device must be a torch device such as 'cpu', 'cuda' or 'cuda:0', "
                f"got {self.device!r}"
            ) from err


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_positive(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )
