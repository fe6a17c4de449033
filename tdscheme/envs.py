"""The env factory of the presets and the command line: gymnasium ids as torchrl envs.

One env is torchrl's ``GymEnv``; several are one gymnasium synchronous vector
env (stepped in this process, auto-reset in the same step) wrapped by torchrl's
``GymWrapper``, with batch size ``[num_envs]``. Fault-injecting variants for
tests live in :mod:`tdscheme.testing`.

Example:
    >>> env = make_env("CartPole-v1", num_envs=4)
    >>> env.batch_size
    torch.Size([4])
    >>> env.rollout(3)["next", "observation"].shape
    torch.Size([4, 3, 4])
    >>> env.close()
"""

from __future__ import annotations

import gymnasium as gym
from torchrl.envs import EnvBase, GymEnv, GymWrapper

__all__ = ["make_env"]


def make_env(env_id: str, *, num_envs: int = 1) -> EnvBase:
    """Builds a torchrl env from a gymnasium id; ``num_envs > 1`` steps that many copies together.

    Several copies are a gymnasium ``SyncVectorEnv`` (one process, no
    subprocesses) with ``AutoresetMode.SAME_STEP``, which is what torchrl's
    ``GymWrapper`` turns into a batched env whose ``("next", "observation")`` is
    the true last observation of an episode. Stepping many envs per call
    amortizes the Python overhead of a torchrl step, which dominates a single
    small env.

    Args:
        env_id: a registered gymnasium env id, e.g. ``"CartPole-v1"``.
        num_envs: copies stepped together, an int ``>= 1``; the env's batch size
            is ``[]`` for 1 and ``[num_envs]`` otherwise.

    Returns:
        A torchrl ``EnvBase`` (a ``TransformedEnv`` around the ``GymWrapper``
        when ``num_envs > 1``).

    Raises:
        ValueError: ``num_envs`` is not an int ``>= 1``.

    Example:
        >>> env = make_env("Pendulum-v1")
        >>> env.batch_size, env.action_spec.shape
        (torch.Size([]), torch.Size([1]))
        >>> env.rollout(5)["next", "reward"].shape
        torch.Size([5, 1])
        >>> env.close()
    """
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs={num_envs!r} is invalid; accepted: an int >= 1")
    if num_envs == 1:
        return GymEnv(env_id)
    vector_env = gym.make_vec(
        env_id,
        num_envs=num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
    )
    return GymWrapper(vector_env)
