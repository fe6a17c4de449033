"""Envs that fail on purpose, for fault drills: rehearse how a run survives a crash, a hang, NaN.

Before trusting a long run to a cluster, break it on purpose: an env that kills its
worker process at step N, raises, hangs like a stuck simulator, turns slow, or
starts giving NaN or inf rewards or observations. :func:`make_faulty_env` builds
such an env from any gymnasium id; it is a module-level function, so Ray workers
import it by reference (``functools.partial(make_faulty_env, ...)`` is a
collector's ``create_env_fn`` like any other). Then watch what the run does:
which worker is restarted, which frames the ledger counts as lost, which error
names the bad key.

Every fault counts steps over the env's whole life (across resets), from 1.

Example:
    >>> env = make_faulty_env("Pendulum-v1", nonfinite_at_step=2)
    >>> env.rollout(3)["next", "reward"].isnan().flatten().tolist()
    [False, True, False]
    >>> env.close()

    In a collector, one worker of two crashes at its 150th step::

        import functools
        from tdscheme import RayCollector
        from tdscheme.envs import make_env, make_faulty_env

        crashing = functools.partial(make_faulty_env, "CartPole-v1", exit_at_step=150)
        collector = RayCollector([crashing, make_env], policy, frames_per_batch=40, ...)
"""

from __future__ import annotations

import os
import time
from typing import Any

import gymnasium as gym
import numpy as np
from torchrl.envs import EnvBase, GymWrapper

from tdscheme.envs.make import make_env

__all__ = ["FaultyEnv", "PixelsLikeObs", "make_faulty_env"]

#: What a hung step sleeps: a day, for a drill far longer than any timeout.
HANG_S = 24 * 3600.0


class FaultyEnv(gym.Wrapper):
    """A gymnasium wrapper that sleeps each step, raises, exits, hangs or gives a bad number at step N.

    Args:
        env: the gymnasium env to wrap.
        sleep_s: seconds to sleep in each ``step`` (a slow simulator, a straggler).
        raise_at_step: raise ``RuntimeError`` at this step and every later one.
        exit_at_step: ``os._exit(1)`` at this step, killing the process like a crash.
        nonfinite_at_step: put ``nonfinite_value`` into ``nonfinite_in`` at this step
            (and at every later one with ``nonfinite_every``).
        nonfinite_in: ``"reward"`` or ``"observation"`` (its first entry).
        nonfinite_value: e.g. ``float("nan")`` or ``float("inf")``.
        nonfinite_every: every step from ``nonfinite_at_step`` on, not just that one.
        hang_at_step: sleep (nearly) forever at this step, like a hung simulator.
        once_path: with ``raise_at_step``, ``exit_at_step`` or ``hang_at_step``,
            only the first env to create this file faults, once (a simulator
            that fails now and then: a rebuilt worker does not fail again).

    Example:
        >>> env = FaultyEnv(gym.make("CartPole-v1"), raise_at_step=2)
        >>> _ = env.reset(seed=0)
        >>> _ = env.step(0)
        >>> env.step(0)
        Traceback (most recent call last):
        ...
        RuntimeError: FaultyEnv: injected failure at step 2
    """

    def __init__(
        self,
        env: gym.Env,
        *,
        sleep_s: float = 0.0,
        raise_at_step: int | None = None,
        exit_at_step: int | None = None,
        nonfinite_at_step: int | None = None,
        nonfinite_in: str = "reward",
        nonfinite_value: float = float("nan"),
        nonfinite_every: bool = False,
        hang_at_step: int | None = None,
        once_path: str | None = None,
    ) -> None:
        super().__init__(env)
        self.sleep_s = sleep_s
        self.raise_at_step = raise_at_step
        self.exit_at_step = exit_at_step
        self.nonfinite_at_step = nonfinite_at_step
        self.nonfinite_in = nonfinite_in
        self.nonfinite_value = nonfinite_value
        self.nonfinite_every = nonfinite_every
        self.hang_at_step = hang_at_step
        self.once_path = once_path
        self.steps = 0

    def step(self, action: Any) -> Any:
        """Steps the wrapped env, with the configured fault at its step."""
        self.steps += 1
        if self.sleep_s:
            time.sleep(self.sleep_s)
        if self.raise_at_step is not None and self.steps >= self.raise_at_step:
            if self._may_fault():
                raise RuntimeError(f"FaultyEnv: injected failure at step {self.steps}")
        if self.exit_at_step is not None and self.steps >= self.exit_at_step:
            if self._may_fault():
                os._exit(1)  # no cleanup, no exception: what a segfaulting simulator looks like
        if self.hang_at_step is not None and self.steps == self.hang_at_step and self._may_fault():
            time.sleep(HANG_S)
        obs, reward, terminated, truncated, info = self.env.step(action)
        at = self.nonfinite_at_step
        if at is not None and (self.steps == at or (self.nonfinite_every and self.steps > at)):
            if self.nonfinite_in == "reward":
                reward = self.nonfinite_value
            else:
                obs = obs.copy()
                obs[0] = self.nonfinite_value
        return obs, reward, terminated, truncated, info

    def _may_fault(self) -> bool:
        if self.once_path is None:
            return True
        try:
            with open(self.once_path, "x"):  # exclusive create: one env of many wins
                return True
        except FileExistsError:
            return False


class PixelsLikeObs(gym.ObservationWrapper):
    """Replaces observations with deterministic uint8 frames of a given shape (pixel-sized batches).

    Args:
        env: the gymnasium env to wrap (its dynamics are kept).
        shape: the frame shape, e.g. ``(4, 84, 84)``.

    Example:
        >>> env = PixelsLikeObs(gym.make("CartPole-v1"), (2, 3))
        >>> obs, _ = env.reset(seed=0)
        >>> obs.shape, obs.dtype
        ((2, 3), dtype('uint8'))
    """

    def __init__(self, env: gym.Env, shape: tuple[int, ...]) -> None:
        super().__init__(env)
        self.observation_space = gym.spaces.Box(0, 255, shape=shape, dtype="uint8")
        self._count = 0

    def observation(self, observation: Any) -> Any:
        """A frame filled with the step count (mod 256)."""
        self._count += 1
        return np.full(self.observation_space.shape, self._count % 256, dtype=np.uint8)


def make_faulty_env(
    env_id: str = "CartPole-v1",
    *,
    num_envs: int = 1,
    sleep_s: float = 0.0,
    raise_at_step: int | None = None,
    exit_at_step: int | None = None,
    hang_at_step: int | None = None,
    once_path: str | None = None,
    obs_shape: tuple[int, ...] | None = None,
    nonfinite_at_step: int | None = None,
    nonfinite_in: str = "reward",
    nonfinite_value: float = float("nan"),
    nonfinite_every: bool = False,
) -> EnvBase:
    """Builds a torchrl env from a gymnasium id that fails as asked; with no fault, :func:`make_env`.

    Args:
        env_id: a registered gymnasium env id.
        num_envs: ``> 1`` steps that many copies together (no faults then), as
            :func:`tdscheme.envs.make_env` does.
        sleep_s: seconds each step sleeps (see :class:`FaultyEnv`).
        raise_at_step: raise ``RuntimeError`` from this step on.
        exit_at_step: kill the process (``os._exit(1)``) at this step.
        hang_at_step: hang at this step.
        once_path: with a fault, a file only the first env creates: it faults once.
        obs_shape: replace observations with uint8 frames of this shape (e.g.
            ``(4, 84, 84)``), to drill large-observation transport (:class:`PixelsLikeObs`).
        nonfinite_at_step: give ``nonfinite_value`` at this step.
        nonfinite_in: ``"reward"`` or ``"observation"``.
        nonfinite_value: e.g. ``float("nan")`` or ``float("inf")``.
        nonfinite_every: at every step from ``nonfinite_at_step`` on.

    Returns:
        A torchrl ``GymWrapper`` over :class:`FaultyEnv` (no fault: :func:`make_env`'s env).

    Raises:
        ValueError: faults or ``obs_shape`` with ``num_envs > 1``, or ``num_envs < 1``.

    Example:
        >>> env = make_faulty_env("CartPole-v1", raise_at_step=3)
        >>> env.rollout(2, break_when_any_done=False).batch_size
        torch.Size([2])
        >>> env.rollout(2)
        Traceback (most recent call last):
        ...
        RuntimeError: FaultyEnv: injected failure at step 3
        >>> env.close()
    """
    faulty = bool(
        sleep_s or raise_at_step or exit_at_step or hang_at_step or obs_shape or nonfinite_at_step
    )
    if not faulty:
        return make_env(env_id, num_envs=num_envs)
    if num_envs > 1:
        raise ValueError("make_faulty_env: faults and obs_shape need num_envs=1")
    env: gym.Env = gym.make(env_id)
    if obs_shape is not None:
        env = PixelsLikeObs(env, obs_shape)
    env = FaultyEnv(
        env, sleep_s=sleep_s, raise_at_step=raise_at_step, exit_at_step=exit_at_step,
        hang_at_step=hang_at_step, once_path=once_path,
        nonfinite_at_step=nonfinite_at_step, nonfinite_in=nonfinite_in,
        nonfinite_value=nonfinite_value, nonfinite_every=nonfinite_every,
    )  # fmt: skip
    return GymWrapper(env)
