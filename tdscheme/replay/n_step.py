"""n-step returns a collector worker computes on its own frames before it writes them (Ape-X's n = 3).

torchrl's :class:`~torchrl.envs.transforms.MultiStepTransform` is a replay-buffer
transform that remembers the last ``n_steps`` of the stream written into it. A
Ray-held buffer is written by many workers, so the stream would mix theirs; here
each worker keeps its own (:class:`NStepFrames`): it holds each env's last
``n_steps`` steps (a copy: a collector may reuse its batch's memory) until the next
batch brings the rewards they look ahead to, and computes the returns with torchrl's
:class:`~torchrl.data.postprocs.MultiStep` over the held steps and the new batch. A
frame's return is then exact: never cut at a batch's end, only at its episode's.

Each frame written holds, as torchrl's transform writes them:

* ``("next", "reward")``: ``r_t + gamma r_{t+1} + ... + gamma^(k-1) r_{t+k-1}``, with
  ``k = steps_to_next_obs`` (``n_steps``, fewer where the episode ends first); the
  one-step reward at ``("next", "original_reward")``;
* the other ``"next"`` entries (the observation to bootstrap from) ``k - 1`` steps later;
* ``steps_to_next_obs``: ``k``, which torchrl's TD(0) value estimators (``DQNLoss``'s
  included) read to discount the bootstrap by ``gamma ** k``;
* ``("next", "terminated")`` of the window's last step. torchrl's transform leaves the
  done flags at the frame's own step, so a window that ends in a termination would
  bootstrap from the terminal observation; here ``terminated`` goes with the
  observation. ``("next", "done")`` and ``("next", "truncated")`` stay the frame's own,
  so an episode still ends once (:func:`~tdscheme.episodes.finished_episodes`).

The frames held back are counted: the first batch of each worker's actor writes
``n_steps`` fewer steps per env than it collected, and every later one as many as it
collected; the ledger books the difference as ``held_back``. Frames still held when
a worker stops are never written.

Example:
    >>> from tensordict import TensorDict
    >>> def steps(start, stop, terminated_at=None):
    ...     t = torch.arange(start, stop).float().view(1, -1, 1)
    ...     end = t == terminated_at
    ...     return TensorDict({"observation": t, "next": {"observation": t + 1,
    ...         "reward": torch.ones_like(t), "done": end, "terminated": end}}, [1, stop - start])
    >>> n_step = NStepFrames(NStep(n_steps=3, gamma=0.5))
    >>> first = n_step(steps(0, 4, terminated_at=4))  # steps 1..3 held for their rewards
    >>> first["next", "reward"].flatten().tolist(), first["next", "observation"].flatten().tolist()
    ([1.75], [3.0])
    >>> later = n_step(steps(4, 8, terminated_at=4))  # steps 1..4 out; step 4 ends the episode
    >>> later["next", "reward"].flatten().tolist()
    [1.75, 1.75, 1.5, 1.0]
    >>> later["steps_to_next_obs"].flatten().tolist(), later["next", "terminated"].flatten().tolist()
    ([3, 3, 2, 1], [False, True, True, True])
    >>> later["next", "done"].flatten().tolist()  # the episode ends once
    [False, False, False, True]
"""

from __future__ import annotations

import dataclasses

import torch
from tensordict import TensorDictBase

from tdscheme.validation import check_int, invalid

__all__ = ["NStep", "NStepFrames"]

# the window's last terminated flag, carried through torchrl's transform as a "next" entry
_END_TERMINATED = ("next", "_n_step_terminated")
# torchrl writes these too; the first is gamma ** steps_to_next_obs, the second its flag
# of a window cut by a done, which says nothing of a termination: neither is stored
_NOT_STORED = ("gamma", "nonterminal")


@dataclasses.dataclass(frozen=True)
class NStep:
    """n-step returns for the frames collector workers write into a replay buffer.

    Give it to :class:`~tdscheme.RayCollector` as ``replay_n_step`` (or to the buffer:
    :class:`~tdscheme.replay.sharded.ShardedReplayBuffer` ``(n_step=...)``); each worker
    builds its own :class:`NStepFrames`.

    Args:
        n_steps: rewards summed per frame (1: one-step frames, as collected).
        gamma: their discount (the loss's).

    Raises:
        ValueError: ``n_steps`` below 1, or ``gamma`` outside (0, 1].
    """

    n_steps: int = 3
    gamma: float = 0.99

    def __post_init__(self) -> None:
        check_int("n_steps", self.n_steps, minimum=1)
        if not 0.0 < self.gamma <= 1.0:
            raise invalid("gamma", self.gamma, "a number in (0, 1]")


class NStepFrames:
    """One worker's n-step returns: each env's last ``n_steps`` steps held until the next batch.

    Args:
        n_step: the returns to compute.
    """

    def __init__(self, n_step: NStep) -> None:
        from torchrl.data.postprocs import MultiStep

        self.n_step = n_step
        self._returns = MultiStep(n_step.gamma, n_step.n_steps)
        self._held: TensorDictBase | None = None

    def __call__(self, frames: TensorDictBase) -> TensorDictBase:
        """The frames ready to write: the ones held since the last batch, then ``frames``
        but their last ``n_steps`` steps (per env), each with its n-step return.

        Args:
            frames: one batch of a worker, ``[time]`` or ``[*env_batch, time]``, whole
                env steps in order (no padding).

        Returns:
            ``[*env_batch, time']`` frames; ``time'`` is 0 while fewer than
            ``n_steps + 1`` steps have come.
        """
        n = self.n_step.n_steps
        if n == 1:
            return frames
        one_env = frames.ndim == 1
        if one_env:  # torchrl's MultiStep sums along the last of at least two dims
            frames = frames.unsqueeze(0)
        following = frames.get("next")
        terminated = following.get("terminated", None)
        following.set(
            _END_TERMINATED[1], following.get("done") if terminated is None else terminated
        )
        stream = frames if self._held is None else torch.cat([self._held, frames], -1)
        self._held = stream[..., -n:].clone()
        if stream.shape[-1] <= n:  # all held: fewer steps than the window so far
            out = stream[..., :0].exclude(_END_TERMINATED)
        else:
            out = self._returns(stream)[..., :-n]
            out.set(("next", "terminated"), out.get(_END_TERMINATED))
            out = out.exclude(_END_TERMINATED, *_NOT_STORED)
        return out.squeeze(0) if one_env else out
