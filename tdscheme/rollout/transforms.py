"""The transforms the lean rollout runs itself: episode bookkeeping, reward and observation maps.

tdscheme's presets (and most torchrl training scripts) wrap their env in
``TransformedEnv(env, Compose(RewardSum(), StepCounter(), ...))`` to record
episode returns and lengths (and ``RewardScaling`` or, for Atari,
``RewardClipping`` after them; ``DoubleToFloat`` before them where the env
observes float64, as MuJoCo does; ``ObservationNorm`` with fixed statistics;
``StepCounter(max_steps=...)`` to cut episodes). These transforms keep a small
state per env copy and touch the reward, the observations (elementwise) or the
truncation flag, so :class:`~tdscheme.rollout.lean.LeanCollector` can run them
per step on plain tensors, in the order of the ``Compose``, with torchrl's
arithmetic (``prev + reward``, ``count + 1``, ``reward * scale + loc``,
``reward.clamp(min, max)``, zeroed where an episode ends; ``obs * scale + loc``
or ``(obs - loc) / scale``; ``truncated |= count >= max_steps``, which ends the
episode; ``DoubleToFloat`` is a cast to the transformed spec's dtype). Any
other transform (``CatFrames``, ``VecNorm``, ...), or these with non-default
keys or options, makes :func:`episode_transforms` give a reason, and the
collector runs torchrl's own rollout.

Example:
    >>> from torchrl.envs import Compose, RewardSum, StepCounter, TransformedEnv
    >>> from tdscheme.envs import make_env
    >>> env = TransformedEnv(make_env("CartPole-v1"), Compose(RewardSum(), StepCounter()))
    >>> tracker = episode_transforms(env)
    >>> tracker.keys
    ['episode_reward', 'step_count']
    >>> state = tracker.initial(env.reset())
    >>> nxt, reward = tracker.step(state, torch.ones(1))
    >>> nxt["episode_reward"].tolist(), nxt["step_count"].tolist(), reward.tolist()
    ([1.0], [1], [1.0])
    >>> tracker.reset(nxt, torch.tensor([True]))["step_count"].tolist()
    [0]
    >>> env.close()
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torchrl.envs import (
    Compose,
    DoubleToFloat,
    ObservationNorm,
    RewardClipping,
    RewardScaling,
    RewardSum,
    StepCounter,
    TransformedEnv,
)
from torchrl.envs.transforms import VecGymEnvTransform

__all__ = ["EpisodeTransforms", "episode_transforms"]


class EpisodeTransforms:
    """The per-step work of the transforms above, in the order of their ``Compose``.

    Built by :func:`episode_transforms`.

    Attributes:
        keys: the state keys these transforms write at the root and under ``"next"``.
    """

    def __init__(self, steps: list[tuple[str, Any]]) -> None:
        self._steps = steps  # (kind, argument) in the Compose's order
        self.keys = [arg for kind, arg in steps if kind in ("sum", "count")]
        self._norms = [arg for kind, arg in steps if kind == "norm"]
        #: the observation keys ``ObservationNorm`` rewrites
        self.normalized_keys = {key for keys, *_ in self._norms for key in keys}
        #: StepCounter's ``max_steps``: the episode is truncated at that count (``None``: never)
        self.max_steps = next((arg for kind, arg in steps if kind == "truncate"), None)

    def initial(self, carrier: Any) -> dict[str, torch.Tensor]:
        """The state torchrl's reset left in ``carrier`` (a TensorDict)."""
        return {key: carrier.get(key) for key in self.keys}

    def step(
        self, state: dict[str, torch.Tensor], reward: torch.Tensor
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """The next state and the reward the batch keeps, as the transforms' ``_step``."""
        nxt: dict[str, torch.Tensor] = {}
        for kind, arg in self._steps:
            if kind == "sum":
                nxt[arg] = state[arg] + reward
            elif kind == "count":
                nxt[arg] = state[arg] + 1
            elif kind == "scale":  # (scale, loc), as RewardScaling without standard_normal
                scale, loc = arg
                reward = reward * scale + loc
            elif kind == "clip":  # (min, max), as RewardClipping (bounds are always tensors)
                reward = reward.clamp(*arg)
            elif kind == "cast" and arg:  # DoubleToFloat on the reward (its observation cast
                reward = reward.to(torch.float32)  # is the lean loop's read: its spec's dtype)
        return nxt, reward

    def observe(self, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The observations the batch keeps, as ``ObservationNorm``'s ``_apply_transform``."""
        for keys, loc, scale, standard_normal in self._norms:
            for key in keys:
                obs[key] = (obs[key] - loc) / scale if standard_normal else obs[key] * scale + loc
        return obs

    def truncate(self, state: dict[str, torch.Tensor], truncated: np.ndarray) -> np.ndarray:
        """``truncated``, and where StepCounter's ``max_steps`` is reached, as its ``_step``."""
        if self.max_steps is None:
            return truncated
        reached = (state["step_count"] >= self.max_steps).numpy()
        return truncated | reached.reshape(truncated.shape)

    def reset(self, nxt: dict[str, torch.Tensor], done: torch.Tensor) -> dict[str, torch.Tensor]:
        """The state after the copies where ``done`` reset (zeros there), as the ``_reset``s."""
        if not done.any():
            return nxt
        return {key: torch.where(~done.reshape(v.shape), v, 0) for key, v in nxt.items()}


def episode_transforms(env: Any) -> EpisodeTransforms | str:
    """The lean form of ``env``'s transforms, or why there is none.

    Args:
        env: a ``TransformedEnv`` (any other env has no transforms to run).

    Returns:
        An :class:`EpisodeTransforms`, or a string saying which transform or
        option the lean rollout does not run.
    """
    if not isinstance(env, TransformedEnv):
        return EpisodeTransforms([])
    transform = env.transform
    parts = list(transform.transforms) if type(transform) is Compose else [transform]
    steps: list[tuple[str, Any]] = []
    if parts and type(parts[0]) is VecGymEnvTransform:
        # torchrl's own first transform of a GymWrapper over a SAME_STEP vector env: it swaps
        # the final and reset observations, which the lean loop's env step does itself
        if parts.pop(0).native_autoreset:
            return "the env's VecGymEnvTransform keeps the native autoreset (native_autoreset)"
    for part in parts:
        step = _lean_step(part)
        if isinstance(step, str):
            return step
        if step[0] == "cast" and any(kind == "norm" for kind, _ in steps):
            return "the env normalizes observations (ObservationNorm) before DoubleToFloat"
        steps.append(step)
        if type(part) is StepCounter and part.max_steps is not None:
            if any(kind == "truncate" for kind, _ in steps):
                return "the env has two StepCounters with max_steps"
            steps.append(("truncate", int(part.max_steps)))
    return EpisodeTransforms(steps)


def _lean_step(transform: Any) -> tuple[str, Any] | str:
    """``(kind, argument)`` of one transform, or why the lean rollout cannot run it."""
    kind = type(transform)
    name = kind.__name__
    if kind is RewardSum:
        keys = (list(transform.in_keys), list(transform.out_keys))
        if keys != (["reward"], ["episode_reward"]) or transform.reward_spec:
            return "the env's RewardSum has keys or options other than the defaults"
        return ("sum", "episode_reward")
    if kind is StepCounter:
        if transform.step_count_key != "step_count" or transform.truncated_key != "truncated":
            return "the env's StepCounter writes keys other than 'step_count' and 'truncated'"
        if transform.max_steps is not None and not transform.update_done:
            return "the env's StepCounter truncates without updating done (update_done=False)"
        return ("count", "step_count")
    if kind is RewardScaling:
        keys = (list(transform.in_keys), list(transform.out_keys))
        if keys != (["reward"], ["reward"]) or bool(transform.standard_normal):
            return "the env's RewardScaling has keys or options other than the defaults"
        return ("scale", (transform.scale, transform.loc))
    if kind is RewardClipping:
        keys = (list(transform.in_keys), list(transform.out_keys))
        if keys != (["reward"], ["reward"]):
            return "the env's RewardClipping has keys other than the defaults"
        return ("clip", (transform.clamp_min, transform.clamp_max))
    if kind is ObservationNorm:
        keys = (list(transform.in_keys), list(transform.out_keys))
        if keys[0] != keys[1] or transform.in_keys_inv or not transform.initialized:
            return "the env's ObservationNorm renames keys, inverts, or has no loc/scale yet"
        if not all(isinstance(key, str) for key in keys[0]):
            return "the env's ObservationNorm normalizes nested keys"
        loc, scale = transform.loc, transform.scale
        return ("norm", (keys[0], loc, scale, bool(transform.standard_normal)))
    if kind is DoubleToFloat:
        keys = (list(transform.in_keys), list(transform.out_keys))
        if keys[0] != keys[1] or not set(keys[0]) <= {"observation", "reward"}:
            return "the env's DoubleToFloat casts keys other than 'observation' and 'reward'"
        if transform.in_keys_inv:
            return "the env's DoubleToFloat casts the action back (in_keys_inv)"
        return ("cast", "reward" in keys[0])
    return f"the env has a {name} transform"
