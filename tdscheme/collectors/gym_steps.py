"""How the lean rollout steps and resets a gymnasium env: one env, a vector env, or its copies.

:class:`~tdscheme.collectors.lean.LeanCollector` steps the gymnasium env under
torchrl's ``GymWrapper`` itself. :func:`gym_steps` picks how:

* one env: ``step(action)``, and ``reset()`` when its episode ended;
* a ``SyncVectorEnv`` that does not reset by itself (``AutoresetMode.DISABLED``,
  what :func:`tdscheme.envs.make_env` builds): each copy stepped in turn and
  the copies whose episode ended reset, written into preallocated arrays. This
  is what ``SyncVectorEnv.step`` and ``reset(options={"reset_mask": ...})``
  do, without their per-call info dicts, observation concatenation and copies;
  the copies get the same calls (``reset(seed=None, options={})``), so the
  frames are the same. While the lean loop runs, the vector env's own batched
  arrays are not updated; any ``reset()`` of the vector env (torchrl's) sets
  them again;
* any other vector env: its ``step``, and ``reset(options={"reset_mask": ...})``
  as torchrl calls it.

Example:
    >>> import gymnasium as gym, numpy as np
    >>> vec = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync",
    ...     vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.DISABLED})
    >>> steps = gym_steps(vec)
    >>> _ = vec.reset(seed=0)
    >>> obs, reward, terminated, truncated = steps.step(np.array([0, 1, 0]))
    >>> obs.shape, reward.tolist(), terminated.dtype
    ((3, 4), [1.0, 1.0, 1.0], dtype('bool'))
    >>> steps.reset(np.array([True, False, False])).shape
    (3, 4)
    >>> vec.close()
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["EnvSteps", "SubEnvSteps", "gym_steps"]


class EnvSteps:
    """Steps a gymnasium env (or vector env) through its own ``step`` / ``reset``.

    Args:
        env: the gymnasium env.
        batched: ``env`` is a vector env (reset with ``reset_mask``).
    """

    def __init__(self, env: Any, *, batched: bool) -> None:
        self.env = env
        self.batched = batched

    def step(self, action: Any) -> tuple[Any, Any, np.ndarray, np.ndarray]:
        """``(observation, reward, terminated, truncated)`` after ``action``."""
        obs, reward, terminated, truncated, _ = self.env.step(action)
        return obs, reward, np.asarray(terminated, dtype=bool), np.asarray(truncated, dtype=bool)

    def reset(self, done: np.ndarray) -> Any:
        """Resets the copies where ``done`` (all for one env); returns every copy's observation."""
        if self.batched:
            return self.env.reset(options={"reset_mask": done.copy()})[0]
        return self.env.reset()[0]


class SubEnvSteps:
    """Steps the copies of a ``SyncVectorEnv`` (autoreset disabled) one by one.

    Args:
        env: a gymnasium ``SyncVectorEnv`` with ``AutoresetMode.DISABLED``.
    """

    def __init__(self, env: Any) -> None:
        self.envs = list(env.envs)
        space = env.single_observation_space
        n = len(self.envs)
        self._obs = np.zeros((n, *space.shape), dtype=space.dtype)
        self._reward = np.zeros(n, dtype=np.float64)  # SyncVectorEnv's reward array
        self._terminated = np.zeros(n, dtype=bool)
        self._truncated = np.zeros(n, dtype=bool)

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Steps copy ``i`` with ``actions[i]``; returns fresh arrays, one row per copy."""
        obs, reward, terminated, truncated = (
            self._obs,
            self._reward,
            self._terminated,
            self._truncated,
        )
        for i, env in enumerate(self.envs):
            obs[i], reward[i], terminated[i], truncated[i], _ = env.step(actions[i])
        return obs.copy(), reward.copy(), terminated.copy(), truncated.copy()

    def reset(self, done: np.ndarray) -> np.ndarray:
        """Resets the copies where ``done``; returns every copy's observation.

        Called after :meth:`step`: the other copies' observations are those it returned.
        """
        for i in np.flatnonzero(done):
            self._obs[i], _ = self.envs[i].reset(seed=None, options={})
        return self._obs.copy()


def gym_steps(env: Any) -> EnvSteps | SubEnvSteps:
    """The stepper of a gymnasium env or vector env (see the module)."""
    from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv

    if type(env) is SyncVectorEnv and env.autoreset_mode == AutoresetMode.DISABLED:
        return SubEnvSteps(env)
    return EnvSteps(env, batched=isinstance(env, VectorEnv))
