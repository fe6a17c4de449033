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
episode; ``DoubleToFloat`` is a cast to the transformed spec's dtype).

Two transforms keep a state of their own that torchrl's code updates:
``CatFrames`` (frame stacking: a buffer of the last N frames per copy) and
``VecNorm`` / ``VecNormV2`` (running statistics of the observations and
rewards). The lean loop calls *their own* ``_step`` and ``_reset`` methods, as
torchrl's ``TransformedEnv`` does, on a small TensorDict of the step's
observations (and reward) or the reset's observations with the ``"_reset"``
mask: their state stays the transform's (checkpoints, ``freeze()``, shared
statistics work unchanged) and their arithmetic is torchrl's. After a reset,
the copies that did not reset keep the observations of the step, as torchrl's
``_update_during_reset`` keeps them (VecNorm updates its statistics with every
copy's reset observation, as in torchrl).

Any other transform, or these with non-default keys or options (renamed
outputs, stateless ``VecNormV2``, ``CatFrames`` as an inverse or on future
frames), makes :func:`episode_transforms` give a reason, and the collector runs
torchrl's own rollout.

Example:
    >>> from torchrl.envs import Compose, RewardSum, StepCounter, TransformedEnv
    >>> from tdscheme.envs import make_env
    >>> env = TransformedEnv(make_env("CartPole-v1"), Compose(RewardSum(), StepCounter()))
    >>> tracker = episode_transforms(env)
    >>> tracker.keys
    ['episode_reward', 'step_count']
    >>> state = tracker.initial(env.reset())
    >>> nxt, reward, obs = tracker.step(state, torch.ones(1), {"observation": torch.zeros(4)})
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
from tensordict import TensorDict
from torchrl.envs import (
    CatFrames,
    Compose,
    DoubleToFloat,
    ObservationNorm,
    RewardClipping,
    RewardScaling,
    RewardSum,
    StepCounter,
    TransformedEnv,
    VecNorm,
    VecNormV2,
)
from torchrl.envs.transforms import VecGymEnvTransform

__all__ = ["EpisodeTransforms", "episode_transforms"]


class EpisodeTransforms:
    """The per-step work of the transforms above, in the order of their ``Compose``.

    Built by :func:`episode_transforms`.

    Attributes:
        keys: the state keys these transforms write at the root and under ``"next"``.
        normalized_keys: the observation keys the transforms rewrite.
        stateful: some transform keeps a state of its own (``CatFrames``, ``VecNorm``).
        max_steps: StepCounter's ``max_steps`` (``None``: no truncation).
    """

    def __init__(self, steps: list[tuple[str, Any]], batch_size: torch.Size) -> None:
        self._steps = steps  # (kind, argument) in the Compose's order
        self._batch_size = batch_size
        self._root = TensorDict(batch_size=batch_size)  # the `tensordict` a _step does not read
        self.keys = [arg for kind, arg in steps if kind in ("sum", "count")]
        own = [arg for kind, arg in steps if kind == "own"]
        self.normalized_keys = {key for kind, arg in steps if kind == "norm" for key in arg[0]}
        self.normalized_keys |= {key for t in own for key in t.in_keys if key != "reward"}
        self.stateful = bool(own)
        self.max_steps = next((arg for kind, arg in steps if kind == "truncate"), None)

    @property
    def batchable(self) -> bool:
        """Whether :meth:`run_batch` does what :meth:`step` and :meth:`reset` do step by step.

        Not with a transform of its own state (``CatFrames``, ``VecNorm``), StepCounter's
        truncation (it ends episodes), or a reward scale or bound of more than one value.
        """
        for kind, arg in self._steps:
            if kind in ("own", "truncate"):
                return False
            if kind in ("scale", "clip") and any(torch.as_tensor(a).numel() != 1 for a in arg):
                return False
        return True

    def normalize(self, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The observations ``ObservationNorm`` keeps (what :meth:`step` does to them, if batchable)."""
        for kind, arg in self._steps:
            if kind == "norm":
                obs = _normalize(arg, obs)
        return obs

    def run_batch(
        self,
        state: dict[str, torch.Tensor],
        reward: torch.Tensor,
        done: np.ndarray,
        held: np.ndarray | None,
    ) -> tuple[dict[str, Any], dict[str, Any], torch.Tensor, dict[str, torch.Tensor]]:
        """A batch of steps at once (time first: ``[steps, copies]``), as :meth:`step` / :meth:`reset`.

        Args:
            state: the state the batch starts from (:meth:`initial`).
            reward: the env's rewards, in the reward spec's dtype.
            done: the episodes that ended at each step (their state zeroed after it).
            held: steps that are no transition (a ``NEXT_STEP`` reset step: the state stays).

        Returns:
            ``(roots, nexts, reward, final)``: each state key's value at each step and
            after it (``[steps, copies]``), the transformed rewards, and the state the
            next batch starts from (shaped as ``state``).
        """
        roots: dict[str, Any] = {}
        nexts: dict[str, Any] = {}
        final = dict(state)
        for kind, arg in self._steps:
            if kind in ("sum", "count"):
                adds = reward.numpy() if kind == "sum" else None
                roots[arg], nexts[arg], last = _accumulate(state[arg], adds, done, held)
                final[arg] = torch.from_numpy(last).reshape(state[arg].shape)
            elif kind == "scale":
                scale, loc = arg
                reward = reward * scale + loc
            elif kind == "clip":
                reward = reward.clamp(*arg)
            elif kind == "cast" and arg:
                reward = reward.to(torch.float32)
        return roots, nexts, reward, final

    def initial(self, carrier: Any) -> dict[str, torch.Tensor]:
        """The state torchrl's reset left in ``carrier`` (a TensorDict)."""
        return {key: carrier.get(key) for key in self.keys}

    def step(
        self,
        state: dict[str, torch.Tensor],
        reward: torch.Tensor,
        obs: dict[str, torch.Tensor],
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor, dict[str, torch.Tensor]]:
        """The next state, reward and observations the batch keeps, as the transforms' ``_step``."""
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
            elif kind == "norm":
                obs = _normalize(arg, obs)
            elif kind == "own":  # the transform's own _step, on the step's entries
                entries = self._own_entries(arg, obs, reward)
                entries = arg._step(self._root, entries)
                obs = {key: entries.get(key) for key in obs}
                reward = entries.get("reward", reward)
        return nxt, reward, obs

    def observe_reset(
        self, obs: dict[str, torch.Tensor], done: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """The observations after the copies where ``done`` reset, as the transforms' ``_reset``."""
        for kind, arg in self._steps:
            if kind == "norm":
                obs = _normalize(arg, obs)
            elif kind == "own":
                mask = TensorDict({"_reset": done}, batch_size=self._batch_size)
                entries = arg._reset(mask, TensorDict(obs, batch_size=self._batch_size))
                obs = {key: entries.get(key) for key in obs}
        return obs

    def _own_entries(
        self, transform: Any, obs: dict[str, torch.Tensor], reward: torch.Tensor
    ) -> TensorDict:
        entries = TensorDict(obs, batch_size=self._batch_size)
        if "reward" in transform.in_keys:
            entries.set("reward", reward)
        return entries

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


def _accumulate(
    start: torch.Tensor, adds: np.ndarray | None, done: np.ndarray, held: np.ndarray | None
) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """RewardSum's ``prev + reward`` (``adds``) or StepCounter's ``count + 1`` (``None``) over steps.

    Numpy's arithmetic on the copies, step by step in torchrl's order and dtypes (IEEE
    adds of the same operands: the same values as torch's).
    """
    acc = start.reshape(-1).numpy().copy()
    one = np.ones((), dtype=acc.dtype)
    dtype = np.result_type(acc, adds) if adds is not None else acc.dtype
    roots = np.empty(done.shape, dtype=acc.dtype)
    nexts = np.empty(done.shape, dtype=dtype)
    for t in range(done.shape[0]):
        roots[t] = acc
        nxt = acc + (adds[t] if adds is not None else one)
        if held is not None and held[t].any():
            nxt = np.where(held[t], acc, nxt)
        nexts[t] = nxt
        acc = nxt.copy()
        acc[done[t]] = 0
    return torch.from_numpy(roots), torch.from_numpy(nexts), acc


def _normalize(arg: tuple[Any, ...], obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``ObservationNorm``'s ``_apply_transform`` on its keys."""
    keys, loc, scale, standard_normal = arg
    for key in keys:
        obs[key] = (obs[key] - loc) / scale if standard_normal else obs[key] * scale + loc
    return obs


def episode_transforms(env: Any) -> EpisodeTransforms | str:
    """The lean form of ``env``'s transforms, or why there is none.

    Args:
        env: a ``TransformedEnv`` (any other env has no transforms to run).

    Returns:
        An :class:`EpisodeTransforms`, or a string saying which transform or
        option the lean rollout does not run.
    """
    if not isinstance(env, TransformedEnv):
        return EpisodeTransforms([], env.batch_size)
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
        if step[0] == "cast" and any(kind in ("norm", "own") for kind, _ in steps):
            return f"the env casts (DoubleToFloat) after {_observation_transform(steps)}"
        steps.append(step)
        if type(part) is StepCounter and part.max_steps is not None:
            if any(kind == "truncate" for kind, _ in steps):
                return "the env has two StepCounters with max_steps"
            steps.append(("truncate", int(part.max_steps)))
    return EpisodeTransforms(steps, env.batch_size)


def _observation_transform(steps: list[tuple[str, Any]]) -> str:
    kind, arg = next(step for step in steps if step[0] in ("norm", "own"))
    return "ObservationNorm" if kind == "norm" else type(arg).__name__


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
    if kind in (CatFrames, VecNorm, VecNormV2):
        return _own_step(transform, name)
    return f"the env has a {name} transform"


def _own_step(transform: Any, name: str) -> tuple[str, Any] | str:
    """``("own", transform)`` for a CatFrames or VecNorm the lean loop can call, or why not."""
    if isinstance(transform, VecNormV2) and not transform.stateful:
        return "the env's VecNormV2 is stateless (its statistics travel in the data)"
    keys = (list(transform.in_keys), list(transform.out_keys))
    if keys[0] != keys[1] or transform.in_keys_inv:
        return f"the env's {name} renames keys (out_keys) or inverts (in_keys_inv)"
    if not all(isinstance(key, str) for key in keys[0]):
        return f"the env's {name} transforms nested keys"
    if isinstance(transform, CatFrames):
        if transform.as_inverse or transform.future or transform.mask_key is not None:
            return "the env's CatFrames is an inverse, looks ahead (future) or masks (mask_key)"
        if transform.reset_key != "_reset":
            return f"the env's CatFrames reads the reset key {transform.reset_key!r}"
        if "reward" in keys[0]:
            return "the env's CatFrames stacks rewards"
    return ("own", transform)
