"""State values for an advantage estimator from one pass of the critic over a batch.

torchrl's ``GAE`` and ``VTrace`` run their value network twice over a batch: once on
the observations and once on the ``("next", ...)`` observations. Within a trajectory
``("next", obs)[t]`` *is* ``obs[t + 1]``, so the second pass recomputes values the
first one has. :func:`write_state_values_` runs the critic on the observations, and on
a ``("next", ...)`` observation only where it differs from the following step's (an
episode's final observation, the batch's last step, anything the layout does not
guarantee): the values are the critic's on exactly the same inputs, for about half
the critic's work. Whether ``("next", obs)[t]`` equals ``obs[t + 1]`` is *checked*
(compared element-wise, which costs far less than a pass of a network), not assumed.

:class:`OnePassValues` puts it in front of a torchrl estimator built without a value
network (torchrl's estimators then read ``state_value`` and ``("next",
"state_value")`` from the batch). The pixel presets' CNN is where it pays: their
estimator's pass over 2 x 1,024 frames was a fifth of ppo-pong's learner time.

Example:
    >>> import torch
    >>> from tensordict import TensorDict
    >>> from torchrl.modules import ValueOperator
    >>> from torchrl.objectives.value import GAE
    >>> critic = ValueOperator(torch.nn.Linear(3, 1), in_keys=["observation"])
    >>> obs = torch.randn(2, 6, 3)  # 2 envs, 6 steps
    >>> done = torch.zeros(2, 5, 1, dtype=torch.bool)
    >>> done[0, 2] = True  # env 0's episode ends at step 2: its next obs is a final one
    >>> batch = TensorDict({
    ...     "observation": obs[:, :5],
    ...     "next": {"observation": obs[:, 1:].clone(), "reward": torch.ones(2, 5, 1),
    ...              "done": done, "terminated": done},
    ... }, batch_size=[2, 5])
    >>> batch["next", "observation"][0, 2] = torch.randn(3)
    >>> one_pass = OnePassValues(GAE(gamma=0.9, lmbda=0.95, value_network=None), critic)
    >>> two_pass = GAE(gamma=0.9, lmbda=0.95, value_network=critic)
    >>> with torch.no_grad():
    ...     a = one_pass(batch.clone())["advantage"]
    ...     b = two_pass(batch.clone())["advantage"]
    >>> torch.allclose(a, b, atol=1e-6)
    True
    >>> one_pass.last_critic_frames  # 10 observations + env 0's final one + 2 last steps
    13
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn

__all__ = ["OnePassValues", "write_state_values_"]


def write_state_values_(
    batch: TensorDictBase, critic: nn.Module, *, value_key: Any = "state_value"
) -> int:
    """Writes the critic's ``value_key`` and ``("next", value_key)`` into ``batch``, in place.

    Args:
        batch: frames shaped ``[..., T]``, time last, with the critic's ``in_keys`` at the
            root and under ``"next"``.
        critic: a TensorDict module whose ``in_keys`` are observations and which writes
            ``value_key`` (torchrl's ``ValueOperator``); it is called without being
            given ``batch`` itself, so it writes nothing else into it.
        value_key: where the critic writes the value.

    Returns:
        The frames the critic ran on (``batch.numel()`` plus the ``("next", ...)``
        observations that are not the following step's).

    Raises:
        ValueError: ``batch`` lacks one of the critic's ``in_keys`` at the root or
            under ``"next"`` (torchrl's compact layout: use the estimator's own pass).
    """
    in_keys = list(critic.in_keys)
    missing = [
        k for k in in_keys if k not in batch.keys(True) or ("next", k) not in batch.keys(True)
    ]
    if missing:
        raise ValueError(
            f"batch lacks the critic's in_keys {missing} at the root or under 'next'; "
            f"OnePassValues needs both (batch keys: {sorted(map(str, batch.keys(True)))})"
        )
    time_dim = batch.ndim - 1
    steps = batch.shape[time_dim]
    values = critic(batch.select(*in_keys)).get(value_key)
    # need[t]: ("next", obs)[t] is not obs[t + 1] (an episode's end, the last step) -> run the critic
    need = torch.ones(batch.shape, dtype=torch.bool, device=values.device)
    if steps > 1:
        same = need.narrow(time_dim, 0, steps - 1).clone()
        for key in in_keys:
            following = batch.get(key).narrow(time_dim, 1, steps - 1)
            nxt = batch.get(("next", key)).narrow(time_dim, 0, steps - 1)
            equal = following == nxt
            same &= equal.reshape(*same.shape, -1).all(-1) if equal.ndim > same.ndim else equal
        need.narrow(time_dim, 0, steps - 1).copy_(~same)
    next_values = torch.empty_like(values)
    next_values.narrow(time_dim, 0, steps - 1).copy_(values.narrow(time_dim, 1, steps - 1))
    next_obs = batch.get("next").select(*in_keys)[need]
    next_values[need] = critic(next_obs).get(value_key)
    batch.set(value_key, values)
    batch.set(("next", value_key), next_values)
    return batch.numel() + next_obs.numel()


class OnePassValues(nn.Module):
    """A torchrl advantage estimator fed by :func:`write_state_values_` (see the module).

    Args:
        estimator: torchrl's ``GAE``, ``VTrace`` or another ``ValueEstimatorBase``, built
            with ``value_network=None`` (it reads the values from the batch).
        critic: the state-value network (the loss's critic, so every update is seen).

    Raises:
        ValueError: ``estimator`` has a value network of its own (it would run it).
    """

    def __init__(self, estimator: nn.Module, critic: nn.Module) -> None:
        super().__init__()
        if getattr(estimator, "value_network", None) is not None:
            raise ValueError(
                f"estimator={type(estimator).__name__} has a value_network; accepted: an "
                f"estimator built with value_network=None (OnePassValues runs the critic)"
            )
        self.estimator = estimator
        self.value_network = critic  # the name torchrl's estimators and Learner's check use
        self.last_critic_frames = 0

    @property
    def tensor_keys(self) -> Any:
        """The estimator's keys (``value``, ``advantage``, ``sample_log_prob``...)."""
        return self.estimator.tensor_keys

    def forward(self, batch: TensorDictBase) -> TensorDictBase:
        """Writes the values into ``batch``, then runs the estimator on it."""
        self.last_critic_frames = write_state_values_(
            batch, self.value_network, value_key=self.estimator.tensor_keys.value
        )
        return self.estimator(batch)
