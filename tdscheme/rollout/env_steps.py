"""How the lean rollout steps and resets its env: gymnasium (one env, a vector env, its copies) or EnvPool.

:class:`~tdscheme.rollout.lean.LeanCollector` steps the env under torchrl's
wrapper itself. :func:`env_steps` picks how, from the torchrl env:

* a ``GymWrapper`` over one gymnasium env: ``step(action)``, and ``reset()``
  when its episode ended;
* over a ``SyncVectorEnv`` that does not reset by itself
  (``AutoresetMode.DISABLED``, what :func:`tdscheme.envs.make_env` builds):
  each copy stepped in turn and the copies whose episode ended reset, written
  into preallocated arrays. This is what ``SyncVectorEnv.step`` and
  ``reset(options={"reset_mask": ...})`` do, without their per-call info
  dicts, observation concatenation and copies; the copies get the same calls
  (``reset(seed=None, options={})``), so the frames are the same. While the
  lean loop runs, the vector env's own batched arrays are not updated; any
  ``reset()`` of the vector env (torchrl's) sets them again;
* over a ``SyncVectorEnv`` that resets a copy in the step that ended its episode
  (``AutoresetMode.SAME_STEP``, the other mode torchrl takes, behind its
  ``VecGymEnvTransform``): each copy stepped in turn, and a copy whose episode
  ended reset at once with ``reset()``, as ``SyncVectorEnv.step`` does; the
  step returns the episode's last observation (gymnasium's ``final_obs``) and
  the reset observation waits for the lean loop's reset, as torchrl's transform
  swaps them. When every copy ended in the same step, torchrl's ``GymWrapper``
  resets the whole vector env once more (a plain ``reset()``) and the next
  observations are that second reset's: so are the lean loop's;
* over any other vector env: its ``step``, and ``reset(options={"reset_mask":
  ...})`` as torchrl calls it (SAME_STEP: the ``final_obs`` of ``step``'s
  info where an episode ended, and no reset call);
* over a one-call ``NEXT_STEP`` vector env (:class:`~tdscheme.envs.gym_vector.NextStepVectorEnv`):
  its ``step_transitions``, and no reset call (the env resets a copy in the call
  after its episode ended); :attr:`NextStepSteps.reset_step` says which copies
  the last call reset, so that the lean loop pads them out;
* torchrl's ``MultiThreadedEnv`` (EnvPool): EnvPool's ``step``; no reset call,
  as torchrl's wrapper: EnvPool resets an env whose episode ended at its next
  step, and until then the env's observation is the episode's last one.

Example:
    >>> import gymnasium as gym, numpy as np
    >>> from torchrl.envs import GymWrapper
    >>> vec = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync",
    ...     vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.DISABLED})
    >>> steps = env_steps(GymWrapper(vec))
    >>> _ = vec.reset(seed=0)
    >>> obs, reward, terminated, truncated = steps.step(np.array([0, 1, 0]))
    >>> obs.shape, reward.tolist(), terminated.dtype
    ((3, 4), [1.0, 1.0, 1.0], dtype('bool'))
    >>> steps.reset(np.array([True, False, False])).shape
    (3, 4)
    >>> vec.close()
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase
from torchrl.data import Categorical, OneHot

from tdscheme.envs.gym_vector import is_next_step_env
from tdscheme.keys import MASK_KEY
from tdscheme.rollout.stamps import write_

__all__ = [
    "EnvPoolSteps",
    "EnvSteps",
    "NextStepSteps",
    "SubEnvSteps",
    "action_to_gym",
    "env_steps",
    "pack_transitions",
]


class EnvSteps:
    """Steps a gymnasium env (or vector env) through its own ``step`` / ``reset``.

    Args:
        env: the gymnasium env.
        batched: ``env`` is a vector env (reset with ``reset_mask``).
    """

    #: the env resets an ended copy in its next step by itself: no :meth:`reset` call, and
    #: the observations a step returned are those the next step starts from
    resets_itself = False

    def __init__(self, env: Any, *, batched: bool, same_step: bool = False) -> None:
        self.env = env
        self.batched = batched
        self.same_step = same_step
        self._reset_obs: Any = None  # SAME_STEP: what the last step's resets observed

    def step(self, action: Any) -> tuple[Any, Any, np.ndarray, np.ndarray]:
        """``(observation, reward, terminated, truncated)`` after ``action``."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self.same_step:
            self._reset_obs = obs
            ended = np.flatnonzero(info.get("_final_obs", ()))
            if ended.size:
                obs = _copy(obs)
                for i in ended:
                    _put(obs, i, info["final_obs"][i])
        return obs, reward, np.asarray(terminated, dtype=bool), np.asarray(truncated, dtype=bool)

    def reset(self, done: np.ndarray) -> Any:
        """Resets the copies where ``done`` (all for one env); returns every copy's observation."""
        if self.same_step and not done.all():
            return self._reset_obs
        if self.batched and self.same_step:  # every copy ended: torchrl resets them all again
            return self.env.reset()[0]
        if self.batched:
            return self.env.reset(options={"reset_mask": done.copy()})[0]
        return self.env.reset()[0]


class SubEnvSteps:
    """Steps the copies of a ``SyncVectorEnv`` (autoreset disabled or same-step) one by one.

    Args:
        env: a gymnasium ``SyncVectorEnv`` with ``AutoresetMode.DISABLED`` or ``SAME_STEP``.
    """

    resets_itself = False

    def __init__(self, env: Any) -> None:
        from gymnasium.vector import AutoresetMode

        self.same_step = env.autoreset_mode == AutoresetMode.SAME_STEP
        self.envs = list(env.envs)
        space = env.single_observation_space
        n = len(self.envs)
        spaces = getattr(space, "spaces", None)  # a Dict space: one array per key
        self._obs: Any = (
            {key: np.zeros((n, *sub.shape), dtype=sub.dtype) for key, sub in spaces.items()}
            if isinstance(spaces, dict)
            else np.zeros((n, *space.shape), dtype=space.dtype)
        )
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
        if isinstance(obs, dict):
            for i, env in enumerate(self.envs):
                observed, reward[i], terminated[i], truncated[i], _ = env.step(actions[i])
                _put(obs, i, observed)
        else:  # one array: written in place, no call per copy (this loop is the hot one)
            for i, env in enumerate(self.envs):
                obs[i], reward[i], terminated[i], truncated[i], _ = env.step(actions[i])
        stepped = _copy(obs)
        if self.same_step:  # as SyncVectorEnv: reset() at once; the step keeps the final obs
            for i in np.flatnonzero(terminated | truncated):
                _put(obs, i, self.envs[i].reset()[0])
        return stepped, reward.copy(), terminated.copy(), truncated.copy()

    def reset(self, done: np.ndarray) -> np.ndarray:
        """Resets the copies where ``done``; returns every copy's observation.

        Called after :meth:`step`: the other copies' observations are those it returned
        (SAME_STEP: the copies were reset in the step; their reset observations).
        """
        if not self.same_step or done.all():  # SAME_STEP, every copy ended: reset again
            for i in np.flatnonzero(done):
                _put(self._obs, i, self.envs[i].reset(seed=None, options={})[0])
        return _copy(self._obs)

    def can_step_in_place(self, row: np.ndarray) -> bool:
        """Whether :meth:`step_in_place` serves a batch ``row``: one array, its dtype and shape."""
        obs = self._obs
        return isinstance(obs, np.ndarray) and row.dtype == obs.dtype and row.shape == obs.shape

    def step_in_place(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`step` returning this stepper's own observation array, not a copy of it.

        The array is valid until the next call (the caller copies what it keeps);
        :meth:`reset_in_place`, not :meth:`reset`, then writes the ended copies'
        reset observations into it.
        """
        obs, reward, terminated, truncated = (
            self._obs, self._reward, self._terminated, self._truncated
        )  # fmt: skip
        for i, env in enumerate(self.envs):
            obs[i], reward[i], terminated[i], truncated[i], _ = env.step(actions[i])
        if self.same_step:  # as step: reset() at once; the array keeps the final obs for now
            self._reset_obs = {
                i: self.envs[i].reset()[0] for i in np.flatnonzero(terminated | truncated)
            }
        return obs, reward.copy(), terminated.copy(), truncated.copy()

    def reset_in_place(self, done: np.ndarray) -> None:
        """:meth:`reset` after :meth:`step_in_place`: the reset observations into its array."""
        if not self.same_step or done.all():  # SAME_STEP, every copy ended: reset again
            for i in np.flatnonzero(done):
                self._obs[i] = self.envs[i].reset(seed=None, options={})[0]
        else:
            for i in np.flatnonzero(done):
                self._obs[i] = self._reset_obs[i]


class EnvPoolSteps:
    """Steps EnvPool's envs (gym API); an ended episode is reset by EnvPool at its next step.

    Args:
        env: the EnvPool env under torchrl's ``MultiThreadedEnv``.
    """

    resets_itself = True  # every env keeps the observation step returned (see the module)

    def __init__(self, env: Any) -> None:
        self.env = env

    def step(self, actions: np.ndarray) -> tuple[Any, Any, np.ndarray, np.ndarray]:
        """``(observation, reward, terminated, truncated)`` after ``actions``."""
        obs, reward, terminated, truncated, _ = self.env.step(actions)
        return obs, reward, np.asarray(terminated, dtype=bool), np.asarray(truncated, dtype=bool)


class NextStepSteps:
    """Steps a one-call ``NEXT_STEP`` vector env; a copy that ended resets in its next call.

    Args:
        env: the :class:`~tdscheme.envs.gym_vector.NextStepVectorEnv`.
    """

    resets_itself = True  # a copy that ended resets in its next step (see the module)

    def __init__(self, env: Any) -> None:
        self.env = env
        #: the copies the last :meth:`step` reset (their outputs are no transition)
        self.reset_step = np.zeros(env.num_envs, dtype=bool)

    def step(self, actions: np.ndarray) -> tuple[Any, Any, np.ndarray, np.ndarray]:
        """``(observation, reward, terminated, truncated)`` after ``actions``."""
        obs, reward, terminated, truncated, self.reset_step = self.env.step_transitions(actions)
        return obs, reward, terminated, truncated


def pack_transitions(
    out: TensorDictBase, valid: torch.Tensor, time_dim: int, keys: Iterable[Any] | None = None
) -> None:
    """Moves each row's transitions (``valid``) to its front, in order; zeroes the rest.

    ``out[MASK_KEY]`` marks the transitions, as torchrl marks padded trajectories.
    Only the frames behind a row's first reset step move: one flat source and one
    destination index (numpy) serve every key, and each leaf moves as one numpy
    gather of whole frames (its bytes per frame as one element), in place; a leaf
    numpy cannot view so (not contiguous) moves through torch's ``index_select``.
    ``keys``: the leaves to pack (default: every leaf); the lean rollout names those
    its steps wrote, not the root done flags (zeros throughout) nor the stamps a
    worker sets after the rollout.
    """
    steps = valid.shape[time_dim]
    rows = valid.numel() // steps
    flags = valid.reshape(rows, steps).numpy()
    counts = flags.sum(1)
    mask = np.arange(steps) < counts[:, None]
    if not mask.all():
        place = np.cumsum(flags, axis=1) - 1  # a transition's column once packed
        source = np.flatnonzero(flags & (place != np.arange(steps)))  # those that move
        target = source - source % steps + place.reshape(-1)[source]
        padding = np.flatnonzero(~mask)
        leaves = out.keys(True, True) if keys is None else keys
        for key in leaves:
            value = out.get(key, None)
            if value is None or key == MASK_KEY:  # compact_obs: no ("next", obs) leaf
                continue
            _move_frames(value, rows * steps, source, target, padding)
    write_(out, MASK_KEY, torch.from_numpy(mask).reshape(valid.shape))


def _move_frames(
    value: torch.Tensor, frames: int, source: np.ndarray, target: np.ndarray, padding: np.ndarray
) -> None:
    """``value``'s frames at ``source`` to ``target`` (flat frame indices), ``padding`` zeroed."""
    if value.numel() == 0:
        return
    if value.is_contiguous():
        # a frame's bytes as one numpy element: one gather per leaf, whatever its shape or dtype
        raw = value.view(frames, -1).view(torch.uint8).numpy()
        whole = raw.view(np.dtype((np.void, raw.shape[1]))).reshape(frames)
        whole[target] = whole[source]  # the gather copies first: overlapping moves are safe
        raw[padding] = 0
        return
    flat = value.reshape(frames, -1)  # a copy where the leaf is not contiguous
    flat.index_copy_(0, torch.from_numpy(target), flat.index_select(0, torch.from_numpy(source)))
    flat.index_fill_(0, torch.from_numpy(padding), 0)
    value.copy_(flat.view(value.shape))


def _put(obs: Any, i: int, value: Any) -> None:
    """Writes one copy's observation (an array, or a dict of arrays) into row ``i``."""
    if isinstance(obs, dict):
        for key, array in obs.items():
            array[i] = value[key]
    else:
        obs[i] = value


def _copy(obs: Any) -> Any:
    return (
        {key: array.copy() for key, array in obs.items()} if isinstance(obs, dict) else obs.copy()
    )


def env_steps(env: Any) -> EnvSteps | SubEnvSteps | EnvPoolSteps | NextStepSteps:
    """The stepper of a torchrl ``GymWrapper`` or ``MultiThreadedEnv`` (see the module)."""
    if is_envpool_env(env):
        return EnvPoolSteps(env._env)
    if is_next_step_env(env):
        return NextStepSteps(env._env)
    from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv

    gym_env = env._env
    mode = getattr(gym_env, "autoreset_mode", None)
    if type(gym_env) is SyncVectorEnv and mode in (AutoresetMode.DISABLED, AutoresetMode.SAME_STEP):
        return SubEnvSteps(gym_env)
    same_step = mode == AutoresetMode.SAME_STEP
    return EnvSteps(gym_env, batched=isinstance(gym_env, VectorEnv), same_step=same_step)


def action_to_gym(env: Any) -> Callable[[torch.Tensor], Any]:
    """``action tensor -> what the env's step takes``, as the torchrl wrapper's ``read_action``.

    Args:
        env: the torchrl ``GymWrapper`` / ``MultiThreadedEnv`` (its action spec).
    """
    spec, batched = env.action_spec, bool(env.batch_size)
    if isinstance(spec, OneHot):
        if batched:  # numpy's argmax: a third of torch's call on a small batch
            return lambda action: action.numpy().argmax(-1)
        return lambda action: int(action.long().argmax(-1))
    if isinstance(spec, Categorical) and not batched:
        return lambda action: int(action)
    return lambda action: action.numpy()


def is_envpool_env(env: Any) -> bool:
    """Whether ``env`` is torchrl's ``MultiThreadedEnv`` (EnvPool), without importing EnvPool."""
    return any(cls.__name__ == "MultiThreadedEnvWrapper" for cls in type(env).__mro__)
