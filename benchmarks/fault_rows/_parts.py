"""What the fault rows build besides their faulty envs, from tdscheme's public API.

The faulty envs are :mod:`tdscheme.envs.faulty`'s; the CartPole networks and
learners are a preset's (:func:`cartpole_preset`); the small policies are plain
torch and tensordict modules. Whatever a Ray worker unpickles must come from an
installed package: a row also runs as ``benchmarks/fault_rows/liveness.py``, and
then the workers cannot import ``fault_rows``. Heavy imports stay inside the functions.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def ray_lease() -> Iterator[Any]:
    """A Ray for the block, as tdscheme starts one (or the one it joins), released after."""
    from tdscheme.runtime import RayLease

    lease = RayLease.acquire(None)
    try:
        yield lease
    finally:
        lease.release()


def cartpole_preset(algo: str = "ppo", *, hidden: int = 8) -> Any:
    """``ppo-cartpole`` or ``a2c-cartpole`` made small: one hidden layer, one update per batch.

    Its ``policy_factory()`` and ``learner_factory()`` are ``functools.partial`` objects
    over tdscheme's functions, so Ray workers import them by reference.

    Args:
        algo: ``"ppo"`` or ``"a2c"``.
        hidden: units of the actor's and the critic's one hidden layer.

    Returns:
        A :class:`tdscheme.presets.Preset`.
    """
    from tdscheme.presets import get_preset

    return get_preset(f"{algo}-cartpole").override(
        {"hidden_sizes": (hidden,), "num_epochs": 1, "minibatch_size": None, "anneal_lr": False,
         "lr": 3e-3, "max_grad_norm": 1.0, "normalize_advantage": False}
    )  # fmt: skip


def linear_policy(obs_dim: int, action_dim: int, *, obs_key: str = "observation") -> Any:
    """A linear ``TensorDictModule`` writing ``"action"`` (torch and tensordict classes only)."""
    from tensordict.nn import TensorDictModule
    from torch import nn

    return TensorDictModule(nn.Linear(obs_dim, action_dim), in_keys=[obs_key], out_keys=["action"])


def alive_actor_ids() -> set[str]:
    """The ids of the Ray actors that are not dead (needs a connected Ray)."""
    # ray.util.state.list_actors asks the dashboard, which the rows' Ray does not run
    # (no dashboard, as tdscheme starts it); the GCS actor table is the same information.
    from ray._private.state import state

    return {aid for aid, info in state.actor_table(None).items() if info["State"] != "DEAD"}
