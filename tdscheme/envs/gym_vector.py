"""gymnasium envs as torchrl envs, gymnasium's default vector env (NEXT_STEP autoreset) included.

torchrl's ``GymWrapper`` takes a vector env whose autoreset mode is ``DISABLED``
(the collector resets the copies that ended, with ``reset_mask``) or
``SAME_STEP``, and refuses gymnasium's default, ``NEXT_STEP``: there the step
after an episode's end is a reset step, whose action the env ignores and whose
"transition" (the final observation to the first one, reward 0) is not one.
``gym.make_vec(env_id, num_envs)`` builds exactly that for every registered env
(a ``SyncVectorEnv``; CartPole's own ``CartPoleVectorEnv``).

:func:`wrap_gym_env` makes such an env a torchrl env without reset steps:

* a ``SyncVectorEnv`` in ``NEXT_STEP`` mode is switched to ``DISABLED`` before
  any step (each copy is the same gymnasium env; the collector resets a copy
  right after its episode ends, with the same ``reset`` call on the same copy, so
  the transitions are those of the same ``SyncVectorEnv`` built ``DISABLED``,
  seed for seed, and ``frames_per_batch`` counts transitions only);
* a vector env that steps its copies in one call (``CartPoleVectorEnv``, an
  ``AsyncVectorEnv``) cannot have one copy reset alone: it is wrapped in
  :class:`NextStepVectorEnv`, which tdscheme's lean rollout
  (:class:`~tdscheme.rollout.lean.LeanCollector`, the default collector of its
  workers) steps. Each call steps every copy; a copy in its reset step yields no
  transition, so a batch row holds the copy's transitions in order, then one
  padding frame per reset step, marked by ``("collector", "mask")`` (``False``)
  and zeroed, as torchrl pads trajectories. The transitions are those of the
  same vector env built ``DISABLED``, seed for seed; ``frames_per_batch`` counts
  env calls times copies, the mask the transitions. torchrl's own rollout cannot
  step it (its ``step`` raises, naming the ways that run).

Envs in the other modes, and single envs, are wrapped as they are. A
collector's ``create_env_fn`` may return the gymnasium env itself: tdscheme's
workers wrap it with :func:`wrap_gym_env`.

Example:
    >>> import gymnasium as gym
    >>> env = wrap_gym_env(gym.make_vec("Acrobot-v1", num_envs=3))
    >>> env.batch_size, env._env.autoreset_mode.name
    (torch.Size([3]), 'DISABLED')
    >>> env.rollout(4)["next", "reward"].shape
    torch.Size([3, 4, 1])
    >>> env.close()
    >>> type(wrap_gym_env(gym.make_vec("CartPole-v1", num_envs=3))._env).__name__
    'NextStepVectorEnv'
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = [
    "NextStepVectorEnv",
    "build_torchrl_env",
    "is_gym_env",
    "is_next_step_env",
    "torchrl_env_factory",
    "wrap_gym_env",
]


def is_gym_env(env: Any) -> bool:
    """Whether ``env`` is a gymnasium ``Env`` or ``VectorEnv`` (not yet a torchrl env)."""
    return isinstance(env, (gym.Env, gym.vector.VectorEnv))


def torchrl_env_factory(create_env_fn: Any) -> Any:
    """``create_env_fn`` whose gymnasium env comes back wrapped (:func:`wrap_gym_env`); picklable."""
    return functools.partial(build_torchrl_env, create_env_fn)


#: torchrl's ``GymWrapper`` refusing gymnasium's default vector env, in its own words: a
#: ``SyncVectorEnv`` is refused by name, CartPole's own vector env fails reading the mode.
_TORCHRL_REFUSALS = ("The auto-reset mode must be one of SAME_STEP or DISABLED", "autoreset_mode")


def build_torchrl_env(create_env_fn: Any) -> Any:
    """``create_env_fn()``, a gymnasium env wrapped (:func:`wrap_gym_env`), any other as it is.

    Raises:
        RuntimeError: ``create_env_fn`` wraps gymnasium's default (``NEXT_STEP``) vector env
            in torchrl's ``GymWrapper``, which refuses it (or fails reading its mode): the
            message names the ways that run.
    """
    try:
        env = create_env_fn()
    except (RuntimeError, AttributeError) as err:
        if not any(words in str(err) for words in _TORCHRL_REFUSALS):
            raise
        raise RuntimeError(
            f"create_env_fn={create_env_fn!r} wraps a gymnasium vector env in NEXT_STEP autoreset "
            f"mode (gymnasium's default) in torchrl's GymWrapper, which refuses it ({err}); "
            f"accepted: return the gymnasium env itself (e.g. lambda: gym.make_vec(env_id, n)), "
            f"which tdscheme wraps with tdscheme.envs.wrap_gym_env (reset steps never reach "
            f"the batch), or build it with autoreset_mode=gym.vector.AutoresetMode.DISABLED"
        ) from err
    return wrap_gym_env(env) if is_gym_env(env) else env


def wrap_gym_env(env: Any, **wrapper_kwargs: Any) -> Any:
    """``env`` as torchrl's ``GymWrapper``; a ``NEXT_STEP`` vector env as the module says.

    Args:
        env: a gymnasium ``Env`` or ``VectorEnv`` (see the module).
        **wrapper_kwargs: ``GymWrapper``'s own arguments (``categorical_action_encoding``, ...).

    Returns:
        The torchrl env.

    Raises:
        TypeError: ``env`` is not a gymnasium env.
    """
    from torchrl.envs import GymWrapper

    if not is_gym_env(env):
        raise TypeError(
            f"env={env!r} is not a gymnasium env; accepted: a gymnasium Env or VectorEnv"
        )
    if (
        isinstance(env, gym.vector.VectorEnv)
        and _autoreset_mode(env) == gym.vector.AutoresetMode.NEXT_STEP
    ):
        if type(env.unwrapped) is gym.vector.SyncVectorEnv:
            _disable_next_step_autoreset(env)
        else:
            env = NextStepVectorEnv(env)
    return GymWrapper(env, **wrapper_kwargs)


def is_next_step_env(env: Any) -> bool:
    """Whether a torchrl env steps a :class:`NextStepVectorEnv` (its ``_env``)."""
    return isinstance(getattr(env, "_env", None), NextStepVectorEnv)


def _autoreset_mode(env: Any) -> Any:
    """A vector env's mode: its attribute, else its metadata's (``CartPoleVectorEnv`` has only that)."""
    base = env.unwrapped
    return getattr(base, "autoreset_mode", None) or env.metadata.get("autoreset_mode")


def _disable_next_step_autoreset(env: Any) -> None:
    """Switches a ``NEXT_STEP`` ``SyncVectorEnv`` to ``DISABLED``."""
    base = env.unwrapped
    if base._autoreset_envs.any():  # a copy waits for its reset step: reset them all first
        base.reset()
    base.autoreset_mode = gym.vector.AutoresetMode.DISABLED
    base.metadata["autoreset_mode"] = gym.vector.AutoresetMode.DISABLED  # the env's own copy


class NextStepVectorEnv(gym.vector.VectorWrapper):
    """A one-call ``NEXT_STEP`` vector env as torchrl's ``GymWrapper`` takes it; the lean rollout steps it.

    To torchrl it reads as ``DISABLED`` (``autoreset_mode``), so that its wrapper
    builds the specs and resets every copy at once; a partial reset (what
    torchrl's rollout asks after an episode ends) and :meth:`step` raise, naming
    the ways that run. The lean rollout calls :meth:`step_transitions`, which
    says which copies were in their reset step.

    Args:
        env: a gymnasium vector env in ``NEXT_STEP`` mode.
    """

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        self.autoreset_mode = gym.vector.AutoresetMode.DISABLED  # what torchrl's wrapper reads
        self.metadata = {**env.metadata, "autoreset_mode": self.autoreset_mode}
        self._resetting = np.zeros(env.num_envs, dtype=bool)  # copies whose next call resets

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None) -> Any:
        """Resets every copy (a ``reset_mask`` must select them all)."""
        options = dict(options or {})
        mask = options.pop("reset_mask", None)
        if mask is not None and not np.all(mask):
            raise RuntimeError(self.refusal("torchrl's rollout resets the copies that ended"))
        self._resetting[:] = False
        return self.env.reset(seed=seed, options=options or None)

    def step(self, actions: Any) -> Any:
        """Refused: see the class (``NEXT_STEP`` steps are not transitions)."""
        raise RuntimeError(self.refusal("torchrl's rollout steps it"))

    def step_transitions(self, actions: Any) -> tuple[Any, Any, np.ndarray, np.ndarray, np.ndarray]:
        """``(obs, reward, terminated, truncated, reset_step)``: one call of every copy.

        ``reset_step[i]``: copy ``i`` was reset in this call (its episode ended in the
        previous one): its action was ignored and its outputs are no transition, but
        ``obs[i]`` is its new episode's first observation.
        """
        obs, reward, terminated, truncated, _ = self.env.step(actions)
        reset_step = self._resetting
        terminated = np.asarray(terminated, dtype=bool)
        truncated = np.asarray(truncated, dtype=bool)
        self._resetting = terminated | truncated
        return obs, reward, terminated, truncated, reset_step

    def refusal(self, what: str) -> str:
        """Why this env cannot run as ``what`` says, and the ways that run."""
        inner = type(self.env.unwrapped).__name__
        spec = getattr(self.env, "spec", None)
        env_id = spec.id if spec is not None else "ENV_ID"
        return (
            f"env={inner} resets a copy in the call after its episode ended (autoreset mode "
            f"NEXT_STEP) and steps its copies in one call, and {what}; accepted: tdscheme's "
            "LeanCollector (the default collector_class of tdscheme's workers) without "
            "options that turn its lean rollout off, or a SyncVectorEnv "
            f"(gym.make_vec({env_id!r}, num_envs, vectorization_mode='sync')), or a vector env "
            "built with vector_kwargs={'autoreset_mode': gym.vector.AutoresetMode.DISABLED}"
        )
