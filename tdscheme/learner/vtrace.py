"""V-trace over the actions the workers took: torchrl's ``VTrace``, scoring the right action.

torchrl 0.14.1's ``VTrace`` (and pytorch/rl's main as of 2026-11) computes the
learner policy's log-prob pi(a) of a *fresh sample* of the policy, not of the action
each frame took (``_call_actor_net`` samples from the distribution, then scores the
sample). The importance weights ``rho = pi(a) / mu(a)`` then compare two different
actions: noise, not a correction for policy lag. :func:`vtrace_estimator` builds
torchrl's ``VTrace`` unchanged over an actor whose distribution "samples" the action
the frame holds, so torchrl scores ``pi(action taken)`` and its V-trace arithmetic
is used as is. ``tests/scheme/test_async_loop.py`` holds it to torchrl's
``vtrace_advantage_estimate`` on the taken actions.

Example:
    >>> import torch
    >>> from tensordict import TensorDict
    >>> from tensordict.nn import TensorDictModule
    >>> from torchrl.modules import OneHotCategorical, ProbabilisticActor, ValueOperator
    >>> head = TensorDictModule(torch.nn.Linear(3, 2), ["observation"], ["logits"])
    >>> actor = ProbabilisticActor(head, ["logits"], distribution_class=OneHotCategorical,
    ...                            return_log_prob=True)
    >>> critic = ValueOperator(torch.nn.Linear(3, 1), in_keys=["observation"])
    >>> estimator = vtrace_estimator(gamma=0.99, actor=actor, critic=critic)
    >>> td = actor(TensorDict(observation=torch.randn(5, 3), batch_size=[5]))
    >>> score = estimator.actor_network.get_dist(td.select("observation", "action"))
    >>> torch.equal(score.sample(), td["action"])
    True
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import InteractionType
from torch import nn
from torchrl.objectives.value import VTrace

__all__ = ["TakenActionScorer", "vtrace_estimator"]


class _TakenAction:
    """A policy's distribution whose samples are the actions the frames took."""

    has_rsample = False

    def __init__(self, dist: Any, action: torch.Tensor) -> None:
        self.dist = dist
        self.action = action
        self.batch_shape = dist.batch_shape

    def sample(self, sample_shape: tuple[int, ...] = ()) -> torch.Tensor:
        if sample_shape:
            raise ValueError(f"sample_shape={tuple(sample_shape)} is invalid; accepted: ()")
        return self.action

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        return self.dist.log_prob(value)


class TakenActionScorer(nn.Module):
    """``VTrace``'s ``actor_network``: the policy, scoring the action each frame holds.

    Args:
        actor: the learner's probabilistic actor (its parameters are the policy's, so
            every update is seen).
        action_key: where the frames hold the action taken.
    """

    def __init__(self, actor: nn.Module, action_key: Any = "action") -> None:
        super().__init__()
        self.actor = actor
        self.action_key = action_key
        self.in_keys = [*actor.in_keys, action_key]
        self.out_keys = list(actor.out_keys)
        self.num_samples = None
        self.default_interaction_type = InteractionType.RANDOM

    def get_dist(self, tensordict: TensorDictBase) -> _TakenAction:
        return _TakenAction(self.actor.get_dist(tensordict), tensordict.get(self.action_key))

    def _dist_sample(self, dist: _TakenAction, interaction_type: Any = None) -> torch.Tensor:
        return dist.sample()  # whatever the interaction type: the action taken


def vtrace_estimator(
    *,
    gamma: float,
    actor: nn.Module,
    critic: nn.Module | None,
    rho_clip: float = 1.0,
    c_clip: float = 1.0,
    action_key: Any = "action",
) -> VTrace:
    """torchrl's ``VTrace`` with pi scored on the actions taken (see the module).

    Args:
        gamma: the discount.
        actor: the learner's probabilistic actor (the policy being trained).
        critic: the state-value network; ``None``: the batches carry ``state_value``
            and ``("next", "state_value")`` (:class:`~tdscheme.learner.values.OnePassValues`).
        rho_clip: the importance-weight clip of the value target (rho-bar).
        c_clip: the trace-cutting clip (c-bar).
        action_key: where the frames hold the action taken.

    Returns:
        The estimator; it reads the behaviour log-probs at its
        ``tensor_keys.sample_log_prob`` (the actor's ``action_log_prob``).
    """
    return VTrace(
        gamma=gamma, actor_network=TakenActionScorer(actor, action_key), value_network=critic,
        rho_thresh=rho_clip, c_thresh=c_clip,
    )  # fmt: skip
