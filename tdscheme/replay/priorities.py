"""Initial priorities a collector worker computes for its own frames before it writes them (Ape-X).

With prioritized replay, a frame written without a priority gets the buffer's max
priority (torchrl's rule), so every new frame is sampled first whatever its worth; at
scale (Ape-X's hundreds of actors) new frames crowd out the rest. Horgan et al. (2018)
let each actor compute its frames' priorities from its own copy of the network. A
``replay_priority_fn`` given to :class:`~tdscheme.RayCollector` runs in each worker
on the batch about to be written, with the worker's policy, under ``torch.no_grad``;
its result is written at the buffer's priority key (``td_error``), where the buffer's
``extend`` takes it as the frames' priorities.

:class:`QLearningPriority` is the one-step Q-learning TD error of a Q-value policy
(torchrl's ``QValueActor`` / ``QValueModule``, which write ``action_value``):
``|r + gamma (1 - terminated) max_a Q(s', a) - Q(s, a)|`` with the worker's network
(Ape-X's actors use their own, slightly stale copy of the online network); on n-step
frames (:mod:`~tdscheme.replay.n_step`) ``gamma ** steps_to_next_obs``, as the loss.

Example:
    >>> import torch
    >>> from tensordict import TensorDict
    >>> from tensordict.nn import TensorDictModule
    >>> from torchrl.modules import QValueModule
    >>> q = TensorDictModule(torch.nn.Linear(2, 3, bias=False), ["observation"], ["action_value"])
    >>> _ = q.module.weight.data.copy_(torch.tensor([[1.0, 0], [0, 1.0], [0, 0]]))
    >>> policy = torch.nn.Sequential(q, QValueModule(action_space="one-hot"))
    >>> td = TensorDict({"observation": torch.tensor([[1.0, 2.0]]),
    ...                  "action_value": torch.tensor([[1.0, 2.0, 0.0]]),
    ...                  "action": torch.tensor([[0, 1, 0]]),
    ...                  "next": {"observation": torch.tensor([[3.0, 0.0]]),
    ...                           "reward": torch.tensor([[1.0]]),
    ...                           "terminated": torch.tensor([[False]])}}, [1])
    >>> QLearningPriority(gamma=0.5)(td, policy)  # |1 + 0.5 * 3 - 2|
    tensor([0.5000])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDictBase

__all__ = ["PriorityFn", "QLearningPriority", "with_priorities"]

#: ``fn(frames, policy) -> priorities``: one non-negative value per frame (``frames.shape``)
PriorityFn = Callable[[TensorDictBase, Any], torch.Tensor]


class QLearningPriority:
    """Q-learning TD errors of a policy that writes ``action_value`` (DQN's priorities).

    One-step, or n-step where the frames hold ``steps_to_next_obs``
    (:mod:`~tdscheme.replay.n_step`): the bootstrap discounted by ``gamma ** k``.

    Args:
        gamma: the discount.
        action_value_key: where the policy writes Q-values (torchrl's ``action_value``).
        action_key: the action taken (one-hot or an index).
        observation_keys: the keys the policy reads (``None``: every key of ``next``
            but the reward and done flags).

    Raises (when called):
        KeyError: the frames or the policy's output lack a key named here.
    """

    def __init__(
        self,
        gamma: float = 0.99,
        *,
        action_value_key: str = "action_value",
        action_key: str = "action",
        observation_keys: list[str] | None = None,
    ) -> None:
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma={gamma!r} is invalid; accepted: a number in [0, 1]")
        self.gamma = gamma
        self.action_value_key = action_value_key
        self.action_key = action_key
        self.observation_keys = observation_keys

    @torch.no_grad()
    def __call__(self, frames: TensorDictBase, policy: Any) -> torch.Tensor:
        taken = _taken(frames.get(self.action_value_key), frames.get(self.action_key))
        following = frames.get("next")
        keys = self.observation_keys or [
            k for k in following.keys() if k not in ("reward", "done", "terminated", "truncated")
        ]
        ahead = following.select(*keys).clone(False)
        best_next = policy(ahead).get(self.action_value_key).max(-1).values
        reward = following.get("reward").reshape(best_next.shape)
        terminated = following.get("terminated").reshape(best_next.shape)
        steps = frames.get("steps_to_next_obs", None)  # n-step frames: the loss's discount
        gamma = self.gamma if steps is None else self.gamma ** steps.reshape(best_next.shape)
        target = reward + gamma * (~terminated).to(reward.dtype) * best_next
        return (target - taken).abs()

    def __repr__(self) -> str:
        return f"QLearningPriority(gamma={self.gamma})"


def _taken(action_value: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """Q(s, a) of the action taken, one-hot or an index."""
    if action.shape == action_value.shape:  # one-hot
        return (action_value * action.to(action_value.dtype)).sum(-1)
    return action_value.gather(-1, action.long().reshape(*action_value.shape[:-1], 1)).squeeze(-1)


def with_priorities(
    frames: TensorDictBase, priority_fn: PriorityFn, policy: Any, key: str = "td_error"
) -> TensorDictBase:
    """``frames`` with ``priority_fn(frames, policy)`` at ``key`` (computed without gradients).

    Raises:
        ValueError: the priorities are not one finite, non-negative value per frame.
    """
    with torch.no_grad():
        priority = torch.as_tensor(priority_fn(frames, policy)).float()
    if (
        priority.shape != frames.batch_size
        or not bool(torch.isfinite(priority).all())
        or bool((priority < 0).any())
    ):
        raise ValueError(
            f"replay_priority_fn returned {tuple(priority.shape)} values (finite and >= 0: "
            f"{bool(torch.isfinite(priority).all() and (priority >= 0).all())}); accepted: one "
            f"finite value >= 0 per frame, shape {tuple(frames.batch_size)}"
        )
    frames.set(key, priority)
    return frames
