"""The env factory of the presets and the command line: gymnasium or EnvPool ids as torchrl envs.

Two backends (``backend=``, the presets' ``--env-backend``):

* ``"gymnasium"`` (default): one env is torchrl's ``GymEnv``; several are one
  gymnasium synchronous vector env (stepped in this process) wrapped by
  torchrl's ``GymWrapper``, with batch size ``[num_envs]``.
* ``"envpool"``: EnvPool steps ``num_envs`` copies in C++ threads, wrapped by
  torchrl's ``MultiThreadedEnv`` (batch size ``[num_envs]``, also for one
  env). It takes EnvPool's ids: ``"CartPole-v1"``, Atari as ``"Pong-v5"`` or
  ``"Breakout-v5"`` (``"ALE/Pong-v5"`` is accepted), whose observations are
  EnvPool's defaults: 4 stacked 84x84 grayscale uint8 frames, 4 frames
  skipped per step. It needs the ``envpool`` extra
  (``pip install -c constraints.txt -e '.[envpool]'`` in tdscheme's clone).

Envs that fail on purpose, for fault drills, live in :mod:`tdscheme.envs.faulty`.

Example:
    >>> env = make_env("CartPole-v1", num_envs=4)
    >>> env.batch_size
    torch.Size([4])
    >>> env.rollout(3)["next", "observation"].shape
    torch.Size([4, 3, 4])
    >>> env.close()
"""

from __future__ import annotations

import functools
import logging
import warnings
from typing import Any

import gymnasium as gym
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Categorical, Composite, Unbounded
from torchrl.envs import EnvBase, GymEnv, GymWrapper, MultiThreadedEnv

from tdscheme.envs.ids import ENV_BACKENDS, entry_point
from tdscheme.validation import install_command

__all__ = ["BACKENDS", "EnvPoolEnv", "make_env", "make_envpool_env"]

#: The env backends :func:`make_env` accepts.
BACKENDS = ENV_BACKENDS

logger = logging.getLogger(__name__)


def make_env(
    env_id: str, *, num_envs: int = 1, backend: str = "gymnasium", render_mode: str | None = None
) -> EnvBase:
    """Builds a torchrl env from a gymnasium id; ``num_envs > 1`` steps that many copies together.

    Several copies are a gymnasium ``SyncVectorEnv`` (one process, no
    subprocesses) with ``AutoresetMode.DISABLED``, the mode torchrl's
    ``GymWrapper`` prefers: gymnasium never resets an env by itself, torchrl
    resets the envs whose episode ended (``reset_mask``) as it does for any
    batched env, so ``("next", "observation")`` is an episode's true last
    observation and each copy steps and resets as a single env would. (With
    ``SAME_STEP`` auto-reset, torchrl must read the last observation from the
    info dict: at every construction it infers that reader's specs from a
    dummy rollout and runs ``check_env_specs``, logging both at INFO, and it
    reads the info dict at every step, which makes it slower.) Stepping many envs
    per call amortizes the Python overhead of a torchrl step, which dominates a
    single small env.

    Args:
        env_id: a registered gymnasium env id, e.g. ``"CartPole-v1"``.
        num_envs: copies stepped together, an int ``>= 1``; the env's batch size
            is ``[]`` for 1 and ``[num_envs]`` otherwise (EnvPool: always
            ``[num_envs]``).
        backend: ``"gymnasium"`` or ``"envpool"`` (see the module).
        render_mode: gymnasium's ``render_mode`` of each copy (``"rgb_array"`` for
            videos: :mod:`tdscheme.engine.video`); the gymnasium backend only (EnvPool
            does not render).

    Returns:
        A torchrl ``GymEnv`` or ``GymWrapper`` (EnvPool: :class:`EnvPoolEnv`, torchrl's
        ``MultiThreadedEnv`` with the gymnasium backend's reward and done shapes).

    Raises:
        ValueError: ``num_envs`` is not an int ``>= 1``, an unknown ``backend``, or a
            ``render_mode`` with ``backend="envpool"``.
        ImportError: ``backend="envpool"`` without EnvPool installed.

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
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is invalid; accepted: {', '.join(BACKENDS)}")
    if backend == "envpool":
        if render_mode is not None:
            raise ValueError(
                f"render_mode={render_mode!r} is invalid with backend='envpool' (EnvPool does "
                "not render); accepted: None, or backend='gymnasium'"
            )
        return make_envpool_env(env_id, num_envs=num_envs)
    render = {} if render_mode is None else {"render_mode": render_mode}
    if entry_point(env_id).startswith("gymnasium.envs.mujoco"):
        _log_mujoco_warnings()
    if num_envs == 1:
        return GymEnv(env_id, **render)
    vector_env = gym.make_vec(
        env_id,
        num_envs=num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.DISABLED},
        **render,
    )
    return GymWrapper(vector_env)


@functools.cache  # once per process: MuJoCo keeps one warning handler
def _log_mujoco_warnings() -> None:
    """Sends MuJoCo's C-level warnings to this module's logger, each message once.

    MuJoCo prints them on the terminal by default, over tdscheme's progress line (gymnasium's
    HalfCheetah model alone prints a deprecation at every construction, in every worker).
    Deprecations of the model's attributes go to DEBUG; any other (a simulation that went
    unstable, a full contact buffer) to WARNING.
    """
    try:
        import mujoco
    except ImportError:  # gymnasium's own error names the missing package when it builds
        return

    warned: set[str] = set()

    def warn(message: str) -> None:
        if message not in warned:
            warned.add(message)
            level = logging.DEBUG if "deprecated" in message else logging.WARNING
            logger.log(level, "MuJoCo: %s", message.strip())

    mujoco.set_mju_user_warning(warn)


def make_envpool_env(
    env_id: str, *, num_envs: int = 1, create_env_kwargs: dict[str, Any] | None = None
) -> EnvPoolEnv:
    """EnvPool's ``num_envs`` copies of ``env_id`` as an :class:`EnvPoolEnv` (batch ``[num_envs]``).

    ``make_env(..., backend="envpool")`` is this with EnvPool's defaults;
    :func:`tdscheme.envs.atari.make_atari_env` passes Atari options.

    Args:
        env_id: an EnvPool id (``"CartPole-v1"``, ``"Pong-v5"``; ``"ALE/Pong-v5"`` is accepted).
        num_envs: copies EnvPool steps in its C++ threads, an int ``>= 1``.
        create_env_kwargs: keyword arguments of ``envpool.make`` (e.g. ``{"reward_clip": True}``
            for Atari); ``env.set_seed(seed)`` rebuilds the pool with ``seed``.

    Returns:
        An :class:`EnvPoolEnv`.

    Raises:
        ImportError: EnvPool is not installed, or older than 1.2.

    Example:
        >>> env = make_envpool_env("CartPole-v1", num_envs=2)  # doctest: +SKIP
        >>> env.rollout(3)["next", "reward"].shape  # doctest: +SKIP
        torch.Size([2, 3, 1])
    """
    try:
        import envpool
    except ImportError as err:
        raise ImportError(
            f"backend='envpool' needs EnvPool ({err}); install it with "
            f"{install_command('envpool')} (EnvPool 1.2 has wheels for CPython 3.11 to 3.13)"
        ) from err
    version = tuple(int(part) for part in envpool.__version__.split(".")[:2] if part.isdigit())
    if version < (1, 2):
        # EnvPool 0.x gives gym (not gymnasium) spaces, and under NumPy 2 broken observations
        raise ImportError(
            f"backend='envpool' needs EnvPool >= 1.2, found EnvPool {envpool.__version__}; "
            f"{install_command('envpool')} installs it"
        )
    # gymnasium's Box warns of EnvPool's float64 bounds (CartPole's, dm_control's) whenever
    # EnvPool builds the env's spaces (at construction, at each reseeding): in this process,
    # not at all
    warnings.filterwarnings("ignore", message=".*precision lowered.*")
    return EnvPoolEnv(
        num_envs, env_id.removeprefix("ALE/"), create_env_kwargs=dict(create_env_kwargs or {})
    )


_ENDS = ("done", "terminated", "truncated")


class EnvPoolEnv(MultiThreadedEnv):
    """torchrl's ``MultiThreadedEnv`` for EnvPool 1.x; reward and done shaped ``[num_envs, 1]``.

    Two changes to torchrl 0.14.1's EnvPool wrapper, which was written for EnvPool 0.8:

    * EnvPool 1.x speaks gymnasium (its ``env_type="gym"`` is gymnasium's API and
      spaces, and several observations come back as a ``dict``, not a treevalue
      tree): the specs are read with torchrl's gymnasium backend (torchrl's
      wrapper forces the ``gym`` backend, which has no converter for gymnasium's
      spaces), and neither ``gym`` nor ``treevalue`` is needed.
    * torchrl's wrapper gives reward and done entries the env's batch shape
      ``[num_envs]``; its gymnasium wrapper (the default backend) ``[num_envs, 1]``,
      the shape torchrl's losses and value estimators expect next to a value of
      ``[..., 1]`` (GAE fails with "All input tensors (value, reward and done
      states) must share a unique shape" otherwise).

    Everything else (EnvPool's own auto-reset at the step after an episode ends,
    reseeding by rebuilding the pool) is torchrl's.
    """

    def _make_specs(self, env: Any) -> None:
        from torchrl.envs.libs.gym import set_gym_backend

        with set_gym_backend("gymnasium"):
            self.action_spec = self._get_action_spec()
            output_spec = self._get_output_spec()
        self.observation_spec = output_spec["full_observation_spec"]
        self.reward_spec = output_spec["full_reward_spec"]
        self.done_spec = output_spec["full_done_spec"]

    def _get_reward_spec(self) -> Unbounded:
        return Unbounded(device=self.device, shape=(*self.batch_size, 1))

    def _get_done_spec(self) -> Composite:
        spec = Categorical(2, device=self.device, shape=(*self.batch_size, 1), dtype=torch.bool)
        ends = {key: spec.clone() for key in _ENDS}
        return Composite(**ends, shape=self.batch_size, device=self.device)

    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        if tensordict is not None and "_reset" in tensordict.keys():
            tensordict = tensordict.clone(False)
            tensordict.set("_reset", tensordict.get("_reset").reshape(self.batch_size))
        return super()._reset(tensordict)

    def _transform_reset_output(
        self, envpool_output: tuple[Any, Any], reset_workers: torch.Tensor | None
    ) -> TensorDictBase:
        observation, _ = envpool_output
        fresh = self._numpy_to_tensors(observation)
        if reset_workers is None:
            self.obs = TensorDict(fresh, self.batch_size, device=self.device)
        else:  # EnvPool returned the reset envs' observations only
            self.obs[reset_workers] = TensorDict(fresh, [len(next(iter(fresh.values())))])
        out = self.obs.clone(False)
        out.update(self.full_done_spec.zero())
        return out

    def _treevalue_or_numpy_to_tensor_or_dict(self, x: Any) -> dict[str, Any]:
        # torchrl's step output calls this; its own imports treevalue (EnvPool 0.x's trees)
        return self._numpy_to_tensors(x)

    @staticmethod
    def _numpy_to_tensors(observation: Any) -> dict[str, Any]:
        """``{"observation": array}``, or EnvPool 1.x's dict of observations, as tensors."""
        if isinstance(observation, dict):
            return {key: torch.as_tensor(value) for key, value in observation.items()}
        return {"observation": torch.as_tensor(observation)}

    def _transform_step_output(self, envpool_output: tuple[Any, ...]) -> TensorDictBase:
        out = super()._transform_step_output(envpool_output)
        for key in ("reward", *_ENDS):
            out.set(key, torch.as_tensor(out.get(key)).reshape(*self.batch_size, 1))
        return out
