"""Vector envs the benchmark scripts share: index actions, synthetic pixel frames, SAME_STEP.

Importable by these names from ``benchmarks/`` (``fast_paths.py``, and the tools
``worker_parity.py`` and ``paired_rounds.py``); their factories are pickled to Ray workers by
reference, as the scripts' others.
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym


def index_action_vec_env(env_id: str, num_envs: int) -> Any:
    """``gym.make_vec(env_id, num_envs)`` in torchrl's wrapper with index (categorical) actions.

    The policy then ends in the argmax the hand-written actors call (no one-hot head,
    no argmax back to an index before the env's step): the same policy work per step.
    """
    from tdscheme.envs import wrap_gym_env

    return wrap_gym_env(gym.make_vec(env_id, num_envs=num_envs), categorical_action_encoding=True)


def pixel_vector_env(env_id: str, num_envs: int, obs_shape: tuple[int, ...]) -> Any:
    """``num_envs`` ``env_id`` envs observing uint8 frames of ``obs_shape`` (``PixelsLikeObs``)
    in a ``SyncVectorEnv`` with autoreset DISABLED, in torchrl's wrapper."""
    from torchrl.envs import GymWrapper

    from tdscheme.envs.faulty import PixelsLikeObs

    copies = [lambda: PixelsLikeObs(gym.make(env_id), obs_shape)] * num_envs
    mode = gym.vector.AutoresetMode.DISABLED
    return GymWrapper(gym.vector.SyncVectorEnv(copies, autoreset_mode=mode))


def same_step_env(env_id: str, num_envs: int) -> Any:
    """``num_envs`` copies of ``env_id`` in a SAME_STEP auto-reset ``SyncVectorEnv``, for torchrl."""
    from torchrl.envs import GymWrapper

    copies = [functools.partial(gym.make, env_id)] * num_envs
    mode = gym.vector.AutoresetMode.SAME_STEP
    return GymWrapper(gym.vector.SyncVectorEnv(copies, autoreset_mode=mode))
