"""Envs: gymnasium or EnvPool ids as torchrl envs, Atari pixels, id checks, envs that fail.

* :mod:`tdscheme.envs.make`: :func:`make_env`, the env factory of the presets and
  the command line (gymnasium or EnvPool, one env or a batch), :func:`make_envpool_env`
  (EnvPool with ``envpool.make``'s options) and :class:`EnvPoolEnv`.
* :mod:`tdscheme.envs.atari`: :func:`make_atari_env`, Atari games as 4x84x84 uint8
  frame stacks with the usual preprocessing (EnvPool, or ale-py through gymnasium).
* :mod:`tdscheme.envs.ids`: :func:`check_env_id` and :func:`close_env_ids`, which
  check an id against gymnasium's registry without importing torch or torchrl.
* :mod:`tdscheme.envs.faulty`: :func:`make_faulty_env` and :class:`FaultyEnv`,
  envs that sleep, raise, crash, hang or give NaN at step N, for fault drills.
* :mod:`tdscheme.envs.gym_vector`: :func:`wrap_gym_env`, a gymnasium env or vector env
  as a torchrl env, gymnasium's default vector env (``NEXT_STEP`` autoreset) included;
  a collector's ``create_env_fn`` may return the gymnasium env itself.
* :mod:`tdscheme.envs.env_config`: how an env takes an env config while workers run it
  (``set_env_config``), :class:`EnvAttributes` (a config sets attributes),
  :func:`make_configurable_env` and :class:`TaskDistribution`.

The names are imported lazily (PEP 562): ``from tdscheme.envs import check_env_id``
imports gymnasium only, so the ``tdscheme`` command checks ``--env-id`` before it
imports torch.

Example:
    >>> from tdscheme.envs import check_env_id, make_env
    >>> check_env_id("CartPole-v1")
    >>> env = make_env("CartPole-v1", num_envs=2)
    >>> env.batch_size
    torch.Size([2])
    >>> env.close()
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tdscheme.facades import lazy_exports

_EXPORTS = {
    "BACKENDS": "tdscheme.envs.make",
    "EnvPoolEnv": "tdscheme.envs.make",
    "make_env": "tdscheme.envs.make",
    "make_envpool_env": "tdscheme.envs.make",
    "ATARI_BACKENDS": "tdscheme.envs.atari",
    "is_atari_id": "tdscheme.envs.atari",
    "make_atari_env": "tdscheme.envs.atari",
    "ENV_BACKENDS": "tdscheme.envs.ids",
    "check_env_id": "tdscheme.envs.ids",
    "close_env_ids": "tdscheme.envs.ids",
    "FaultyEnv": "tdscheme.envs.faulty",
    "make_faulty_env": "tdscheme.envs.faulty",
    "wrap_gym_env": "tdscheme.envs.gym_vector",
    "EnvAttributes": "tdscheme.envs.env_config",
    "TaskDistribution": "tdscheme.envs.env_config",
    "make_configurable_env": "tdscheme.envs.env_config",
}

__all__ = [
    "ATARI_BACKENDS",
    "BACKENDS",
    "ENV_BACKENDS",
    "EnvAttributes",
    "EnvPoolEnv",
    "FaultyEnv",
    "TaskDistribution",
    "check_env_id",
    "close_env_ids",
    "is_atari_id",
    "make_atari_env",
    "make_configurable_env",
    "make_env",
    "make_envpool_env",
    "make_faulty_env",
    "wrap_gym_env",
]

if TYPE_CHECKING:
    from tdscheme.envs.atari import ATARI_BACKENDS, is_atari_id, make_atari_env
    from tdscheme.envs.env_config import EnvAttributes, TaskDistribution, make_configurable_env
    from tdscheme.envs.faulty import FaultyEnv, make_faulty_env
    from tdscheme.envs.gym_vector import wrap_gym_env
    from tdscheme.envs.ids import ENV_BACKENDS, check_env_id, close_env_ids
    from tdscheme.envs.make import BACKENDS, EnvPoolEnv, make_env, make_envpool_env

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
