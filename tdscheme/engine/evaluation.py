"""Evaluation: run a policy on an env for a number of whole episodes and report the return.

The policy runs under torchrl's ``set_exploration_type`` (deterministic by default:
the mode of a categorical, the mean of a normal), without gradients. A batched env
(``batch_size [N]``) runs N episodes at a time; each copy contributes the same
number of episodes, so short episodes are not over-represented.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import statistics

import torch
from tensordict import TensorDictBase
from torch import nn
from torchrl.envs import EnvBase
from torchrl.envs.utils import ExplorationType, set_exploration_type

__all__ = ["EvalResult", "evaluate"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class EvalResult:
    """Returns and lengths of the evaluated episodes.

    Attributes:
        returns: the undiscounted return of each episode.
        lengths: the number of steps of each episode.
    """

    returns: tuple[float, ...]
    lengths: tuple[int, ...]

    @property
    def mean_return(self) -> float:
        """Mean return over the episodes."""
        return statistics.fmean(self.returns)

    @property
    def std_return(self) -> float:
        """Population standard deviation of the returns (0 for one episode)."""
        return statistics.pstdev(self.returns)

    @property
    def mean_length(self) -> float:
        """Mean episode length."""
        return statistics.fmean(self.lengths)

    def metrics(self, prefix: str = "eval/") -> dict[str, float]:
        """``{prefix}return``, ``return_std``, ``episode_length`` and ``episodes``, as floats."""
        return {
            f"{prefix}return": self.mean_return,
            f"{prefix}return_std": self.std_return,
            f"{prefix}episode_length": self.mean_length,
            f"{prefix}episodes": float(len(self.returns)),
        }


def evaluate(
    env: EnvBase,
    policy: nn.Module,
    *,
    episodes: int = 10,
    max_steps: int = 100_000,
    deterministic: bool = True,
) -> EvalResult:
    """Runs ``policy`` on ``env`` until ``episodes`` episodes have finished.

    Args:
        env: a torchrl env, single or batched (``batch_size [N]``); it is reset first.
        policy: a TensorDict module writing ``"action"``.
        episodes: how many episodes to report (``>= 1``).
        max_steps: give up after this many (batched) env steps.
        deterministic: act with ``ExplorationType.DETERMINISTIC`` (else ``RANDOM``).

    Returns:
        The first ``ceil(episodes / N)`` episodes of each env copy, ``episodes`` in all.

    Raises:
        ValueError: ``episodes`` or ``max_steps`` is not a positive int.
        RuntimeError: fewer than ``episodes`` episodes finished within ``max_steps``
            steps.

    Example:
        >>> from tdscheme.envs import make_env
        >>> from tdscheme.presets.actor_critic import actor_critic_modules
        >>> actor = actor_critic_modules("Pendulum-v1", hidden_sizes=(8,))["actor"]
        >>> result = evaluate(make_env("Pendulum-v1"), actor, episodes=1)
        >>> result.lengths, result.mean_return < 0
        ((200,), True)
    """
    for name, value in (("episodes", episodes), ("max_steps", max_steps)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} is invalid; accepted: an int >= 1")
    copies = max(1, env.batch_size.numel())
    quota = math.ceil(episodes / copies)
    done_returns: list[list[float]] = [[] for _ in range(copies)]
    done_lengths: list[list[int]] = [[] for _ in range(copies)]
    running = torch.zeros(copies, dtype=torch.float64)
    length = torch.zeros(copies, dtype=torch.int64)
    device = _module_device(policy)
    mode = ExplorationType.DETERMINISTIC if deterministic else ExplorationType.RANDOM
    with torch.no_grad(), set_exploration_type(mode):
        td = env.reset()
        for _ in range(max_steps):
            td = _act(policy, td, device, env.device)
            td, next_td = env.step_and_maybe_reset(td)
            running += td.get(("next", "reward")).reshape(copies).double().cpu()
            length += 1
            finished = td.get(("next", "done")).reshape(copies).cpu()
            for i in finished.nonzero().flatten().tolist():
                if len(done_returns[i]) < quota:
                    done_returns[i].append(running[i].item())
                    done_lengths[i].append(int(length[i].item()))
            running[finished] = 0.0
            length[finished] = 0
            td = next_td
            if all(len(r) >= quota for r in done_returns):
                break
        else:
            got = sum(map(len, done_returns))
            raise RuntimeError(
                f"evaluate: only {got} of {episodes} episodes finished within max_steps="
                f"{max_steps} env steps; raise max_steps or check that the env ends episodes"
            )
    returns = [r for per_env in done_returns for r in per_env][:episodes]
    lengths = [n for per_env in done_lengths for n in per_env][:episodes]
    return EvalResult(returns=tuple(returns), lengths=tuple(lengths))


def _module_device(module: nn.Module) -> torch.device | None:
    for tensor in module.parameters():
        return tensor.device
    return None


def _act(
    policy: nn.Module,
    td: TensorDictBase,
    device: torch.device | None,
    env_device: torch.device | None,
) -> TensorDictBase:
    if device is None or device == td.device or (td.device is None and device.type == "cpu"):
        return policy(td)
    return policy(td.to(device)).to(env_device or "cpu")
