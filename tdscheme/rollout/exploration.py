"""Exploration that differs from worker to worker (Ape-X's epsilons), kept through weight pushes.

Horgan et al. (2018) give each of N actors its own fixed epsilon,
``eps_i = eps ** (1 + alpha * i / (N - 1))`` (``eps = 0.4``, ``alpha = 7``): a few
workers explore a lot, most little, and the replay holds both. torchrl's
``EGreedyModule`` keeps epsilon in buffers, which travel with the policy's weights, so
every push would give every worker the learner's value. :class:`PerWorkerEGreedy` is
torchrl's module with epsilon out of the weights (a plain attribute, never annealed),
and :func:`per_worker_policies` gives each worker its own copy of a policy holding one,
set for that worker (``RayCollector`` does it for the policy it sends).

Example:
    >>> import torch
    >>> from torchrl.data import OneHot
    >>> from tensordict.nn import TensorDictSequential
    >>> greedy = PerWorkerEGreedy(OneHot(2), eps=0.4, alpha=7.0)
    >>> policy = TensorDictSequential(greedy)
    >>> [round(float(p[0].eps), 4) for p in per_worker_policies(policy, 3)]
    [0.4, 0.0162, 0.0007]
    >>> sorted(dict(policy.state_dict()))  # nothing for a weight push to overwrite
    []
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn
from torchrl.modules import EGreedyModule

__all__ = ["PerWorkerEGreedy", "per_worker_policies"]


class PerWorkerEGreedy(EGreedyModule):
    """torchrl's ``EGreedyModule`` with a fixed epsilon of its own per worker, not in the weights.

    Args:
        spec: the action spec (torchrl's ``spec``).
        eps: the base epsilon (Ape-X: 0.4); a copy that no worker set keeps it.
        alpha: Ape-X's exponent (7).
        **kwargs: ``EGreedyModule``'s other keyword arguments (``action_key``, ...).
    """

    def __init__(self, spec: Any, eps: float = 0.4, alpha: float = 7.0, **kwargs: Any) -> None:
        if not 0.0 <= eps <= 1.0:
            raise ValueError(f"eps={eps!r} is invalid; accepted: a number in [0, 1]")
        if not alpha >= 0:
            raise ValueError(f"alpha={alpha!r} is invalid; accepted: a number >= 0")
        super().__init__(spec, eps_init=eps, eps_end=eps, annealing_num_steps=1, **kwargs)
        for name in ("eps", "eps_init", "eps_end"):  # out of the state: pushes leave it
            del self._buffers[name]
        self.base_eps = eps
        self.alpha = alpha
        self.eps = torch.tensor(eps)

    def step(self, frames: int = 1) -> None:
        """Fixed: nothing anneals."""

    def for_worker_(self, index: int, num_workers: int) -> PerWorkerEGreedy:
        """Sets worker ``index`` of ``num_workers``'s epsilon, ``eps ** (1 + alpha * index / (N - 1))``."""
        power = 1.0 + (self.alpha * index / (num_workers - 1) if num_workers > 1 else 0.0)
        self.eps = torch.tensor(self.base_eps**power)
        return self

    def extra_repr(self) -> str:
        return f"eps={float(self.eps):.4g}, base_eps={self.base_eps}, alpha={self.alpha}"


def per_worker_policies(policy: Any, num_workers: int) -> list[Any]:
    """``policy`` for each of ``num_workers`` workers: a copy each, set per worker, where it explores per worker.

    A policy without a module that has ``for_worker_(index, num_workers)`` is shared as is.
    """
    if not isinstance(policy, nn.Module) or not any(
        hasattr(m, "for_worker_") for m in policy.modules()
    ):
        return [policy] * num_workers
    copies = []
    for index in range(num_workers):
        mine = copy.deepcopy(policy)
        for module in mine.modules():
            if hasattr(module, "for_worker_"):
                module.for_worker_(index, num_workers)
        copies.append(mine)
    return copies
