"""The bare loop: an env's own steps and a policy's calls, nothing else: what a collector can reach.

``tdscheme bench`` sets a preset's collection rate beside this one. The loop
steps the gymnasium or EnvPool env under the torchrl env directly (as the lean
rollout does: :mod:`~tdscheme.rollout.env_steps`), calls the policy on each
step's observations (a TensorDict of them, under the collector's default
exploration, without gradients) and resets the copies whose episode ended. It
writes no batch, runs no transform, keeps no trajectory ids and sends nothing
anywhere: every collector does at least this work per frame, so its frames/s on
one process is the limit of one worker on this machine.

Example:
    >>> from tdscheme.envs import make_env
    >>> from tdscheme.presets.actor_critic import actor_critic_modules
    >>> actor = actor_critic_modules("CartPole-v1", hidden_sizes=(8,))["actor"]
    >>> rate = bare_loop_rate(lambda: make_env("CartPole-v1", num_envs=4), actor, seconds=0.2)
    >>> rate.frames_per_s > 0 and rate.reason is None
    True
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict
from torchrl.envs import TransformedEnv
from torchrl.envs.utils import ExplorationType, set_exploration_type

from tdscheme.rollout.env_checks import final_observation_roots, why_not_lean_env
from tdscheme.rollout.env_steps import action_to_gym, env_steps
from tdscheme.rollout.observations import observations

__all__ = ["BareRate", "bare_loop_rate"]


@dataclass(frozen=True)
class BareRate:
    """What :func:`bare_loop_rate` measured.

    Attributes:
        frames_per_s: env frames per second (``None`` when the loop cannot run).
        frames: frames stepped in the measured window.
        reason: why the bare loop cannot step this env (``None`` when it ran).
    """

    frames_per_s: float | None
    frames: int = 0
    reason: str | None = None


def bare_loop_rate(
    env_factory: Callable[[], Any], policy: Any, *, seconds: float, warmup_s: float = 0.5
) -> BareRate:
    """Frames per second of the bare loop (see the module) on ``env_factory()``'s env.

    Args:
        env_factory: builds the torchrl env (a preset's, transforms are skipped).
        policy: called on a TensorDict of the observations; writes ``"action"``.
        seconds: the measured window, after ``warmup_s`` of the same loop.
        warmup_s: steps not counted (first calls, allocations).

    Returns:
        A :class:`BareRate`; its ``reason`` says why the loop could not run (an env
        the lean rollout does not step itself, or a policy that needs more than
        the observations).
    """
    env = env_factory()
    try:
        base = env.base_env if isinstance(env, TransformedEnv) else env
        why = why_not_lean_env(base)
        if why is not None:
            return BareRate(None, reason=why)
        reader = observations(base, base, skip=final_observation_roots(base))
        if isinstance(reader, str):
            return BareRate(None, reason=reader)
        steps, to_gym = env_steps(base), action_to_gym(base)
        obs = {key: value for key, value in base.reset().items() if key in reader.keys}
        per_step = max(1, int(base.batch_size.numel()))
        frames, start, measured = 0, time.perf_counter(), None
        with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
            while True:
                now = time.perf_counter()
                if measured is None and now - start >= warmup_s:
                    measured, frames = now, 0
                if measured is not None and now - measured >= seconds:
                    return BareRate(frames / (now - measured), frames)
                try:
                    action = policy(TensorDict(obs, batch_size=base.batch_size)).get("action")
                except (KeyError, RuntimeError) as err:
                    return BareRate(None, reason=f"the policy needs more than observations: {err}")
                raw, _, terminated, truncated = steps.step(to_gym(action))
                obs = reader.read(raw)
                done = np.asarray(terminated | truncated).reshape(-1)
                if done.any():
                    obs = reader.read(steps.reset(done))
                frames += per_step
    finally:
        if not env.is_closed:
            env.close()
