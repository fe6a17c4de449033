"""LeanCollector: torchrl's ``Collector`` with a lean rollout over plain gymnasium or EnvPool envs.

The default collector class of tdscheme's workers. It *is* a torchrl
``Collector`` (constructor, weights, seeding, ``reset``, ``state_dict``, the
preallocated batch buffer and the trajectory-id pool are torchrl's own); only
:meth:`LeanCollector.rollout` changes, and only where the env is a plain
torchrl ``GymWrapper`` / ``GymEnv`` over a gymnasium env or vector env (with
``AutoresetMode.DISABLED``, as :func:`tdscheme.envs.make_env` builds it, or
``SAME_STEP``, behind torchrl's ``VecGymEnvTransform``; a one-call ``NEXT_STEP``
vector env, :class:`~tdscheme.envs.gym_vector.NextStepVectorEnv`, runs here only: each
row holds its copy's transitions, then padding for its reset steps) or
torchrl's ``MultiThreadedEnv`` over EnvPool (``make_env(...,
backend="envpool")``), bare or in a ``TransformedEnv`` whose transforms are
episode bookkeeping the lean loop runs itself (``RewardSum``, ``StepCounter``,
``RewardScaling``, ``RewardClipping``, ``DoubleToFloat``, ``ObservationNorm``,
``StepCounter(max_steps)``, and ``CatFrames`` / ``VecNorm`` through their own
``_step`` and ``_reset``: :mod:`~tdscheme.rollout.transforms`), and the collector
runs none of torchrl's per-frame options (postproc, a replay buffer of its own,
device casts, ...; ``trajs_per_batch`` is fine: torchrl assembles its trajectories
from the batches this rollout returns). Then each step:

* calls the policy once, under ``torch.no_grad`` and the collector's
  exploration type, on a fresh TensorDict holding what torchrl's carrier holds
  (observation, ``done`` / ``terminated`` / ``truncated``,
  ``("collector", "traj_ids")``), or, while torchrl's collector would take
  random frames (``init_random_frames``), draws the action as torchrl does
  (``env.rand_action``) and leaves the policy's other outputs as torchrl leaves
  them;
* steps the gymnasium or EnvPool env directly, converting actions and outputs
  as the torchrl wrapper's readers do (one-hot -> index, each observation key,
  a gymnasium ``Dict``'s and uint8 pixels included
  (:mod:`~tdscheme.rollout.observations`), and reward
  cast to their spec's dtype and shape, ``done = terminated | truncated``)
  without their per-call spec lookups, and resets the copies whose episode
  ended as torchrl does (gymnasium: ``reset_mask``, a single env ``reset()``;
  EnvPool resets them itself at their next step:
  :mod:`~tdscheme.rollout.env_steps`);
* writes every entry into torchrl's preallocated batch (``use_buffers``), so
  no per-step TensorDict is built, copied, stacked or ``step_mdp``-ed.

Where the policy reads only observations, :mod:`~tdscheme.rollout.staged`'s loop runs.

Frames are those of torchrl's ``Collector`` on the same env, policy and seed,
frame for frame: same keys, same ``"next"`` layout, same values
(``tests/collectors/test_lean.py`` checks it). Any other env or option runs
torchrl's own ``rollout`` unchanged. :attr:`LeanCollector.lean_reason` says
which path runs and why.

Example:
    >>> from tdscheme.envs import make_env
    >>> from tensordict.nn import TensorDictModule
    >>> policy = TensorDictModule(torch.nn.Linear(3, 1), in_keys=["observation"],
    ...                           out_keys=["action"])
    >>> collector = LeanCollector(make_env("Pendulum-v1", num_envs=2), policy, frames_per_batch=8)
    >>> collector.lean_reason is None  # the lean path runs
    True
    >>> batch = next(iter(collector))
    >>> batch.batch_size, batch["next", "reward"].shape
    (torch.Size([2, 4]), torch.Size([2, 4, 1]))
    >>> collector.shutdown()
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Bounded, Categorical, OneHot, Unbounded
from torchrl.envs import TransformedEnv
from torchrl.envs.utils import set_exploration_type

from tdscheme.envs.gym_vector import is_next_step_env
from tdscheme.keys import DONE_KEYS, TRAJ_IDS_KEY
from tdscheme.rollout.env_checks import final_observation_roots, is_same_step, why_not_lean_env
from tdscheme.rollout.env_steps import (
    EnvPoolSteps,
    EnvSteps,
    NextStepSteps,
    SubEnvSteps,
    action_to_gym,
    env_steps,
    is_envpool_env,
    pack_transitions,
)
from tdscheme.rollout.module_calls import policy_call
from tdscheme.rollout.observations import observations
from tdscheme.rollout.staged import can_stage, staged_rollout
from tdscheme.rollout.torchrl_names import Collector, default_collector_kwargs
from tdscheme.rollout.transforms import episode_transforms

logger = logging.getLogger(__name__)

__all__ = ["LeanCollector"]


def _where(done: torch.Tensor, reset: torch.Tensor, kept: torch.Tensor) -> torch.Tensor:
    """``reset`` where the copy's episode ended (``done``: the env's batch shape), else ``kept``."""
    return torch.where(done.reshape(done.shape + (1,) * (reset.ndim - done.ndim)), reset, kept)


class LeanCollector(Collector):
    """torchrl's ``Collector`` whose rollout steps plain gymnasium envs without per-step TensorDicts.

    Takes exactly torchrl's ``Collector`` arguments, with tdscheme's defaults
    (:func:`~tdscheme.rollout.torchrl_names.default_collector_kwargs`: the env left as
    built, without torchrl's ``FutureWarning`` about it) under the caller's own. See the
    module docstring for when the lean rollout runs; otherwise this is torchrl's ``Collector``.

    Attributes:
        lean_reason: ``None`` when the lean rollout runs, else why torchrl's runs.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{**default_collector_kwargs(Collector), **kwargs})
        #: called with the env batch's size after each env step of the lean loop (torchrl's
        #: rollout steps through ``env.step_and_maybe_reset``, which a caller can wrap)
        self.step_hook: Callable[[int], None] | None = None
        #: called before each env step of the lean loop (env configs: rollout/env_config.py)
        self.before_step: Callable[[], None] | None = None
        self.lean_reason = self._why_not_lean()
        if self.lean_reason is not None:
            logger.debug("LeanCollector runs torchrl's rollout: %s", self.lean_reason)
        else:
            self._make_batch_contiguous()
        self._refuse_unsteppable_env()

    def _make_batch_contiguous(self) -> None:
        """Lays out each leaf of torchrl's batch buffer in its own index order.

        torchrl builds the buffer from the first observations, keeping their strides:
        a vector env that returns a column-major array (CartPole's) gives a leaf whose
        frames are not contiguous, which packing reset steps out and the transport
        would otherwise each copy at every batch. The lean loop writes its rows either way.
        """
        out = self._final_rollout
        for key, value in list(out.items(True, True)):
            if not value.is_contiguous():
                out.set(key, value.contiguous())

    # torchrl's signature, so that callers inspecting it (worker_idx, ...) see torchrl's arguments
    __init__.__signature__ = inspect.signature(Collector.__init__)  # type: ignore[attr-defined]

    def _refuse_unsteppable_env(self) -> None:
        """A one-call ``NEXT_STEP`` env runs on the lean rollout only, in batches of env rows."""
        base = self.env.base_env if isinstance(self.env, TransformedEnv) else self.env
        if not is_next_step_env(base):
            return
        why = self.lean_reason
        if why is None and getattr(self, "trajs_per_batch", None):
            why = "trajs_per_batch is set (its rows hold padding for the reset steps)"
        if why is not None:
            raise ValueError(base._env.refusal(f"tdscheme's lean rollout does not run: {why}"))

    def _why_not_lean(self) -> str | None:
        transforms = episode_transforms(self.env)
        if isinstance(transforms, str):
            return transforms
        self._transforms = transforms
        env = self._base_env = (
            self.env.base_env if isinstance(self.env, TransformedEnv) else self.env
        )
        why = why_not_lean_env(env)
        if why is not None:
            return why
        if env.device not in (None, torch.device("cpu")):
            return "the env lives on a device"
        # a SAME_STEP env's final observations ("final", ...) are torchrl's, swapped in by it
        reader = observations(self.env, env, skip=final_observation_roots(env))
        if isinstance(reader, str):
            return reader
        self._observations = reader
        if not transforms.normalized_keys <= set(reader.keys):
            return "the env's ObservationNorm normalizes keys that are not observations"
        if transforms.stateful and is_envpool_env(env):
            # torchrl's MultiThreadedEnv keeps the transformed observations as its own (a
            # CatFrames' stack fails its next partial reset): EnvPool stacks with stack_num
            return "the env runs CatFrames or VecNorm over EnvPool (EnvPool stacks: stack_num)"
        if transforms.stateful and is_next_step_env(env):  # they would see the reset steps
            return "the env runs CatFrames or VecNorm over a one-call NEXT_STEP vector env"
        resets_itself = is_envpool_env(env) or is_same_step(env) or is_next_step_env(env)
        if transforms.max_steps is not None and resets_itself:
            return "the env's StepCounter truncates (max_steps) an env that resets by itself"
        if sorted(env.done_keys) != sorted(DONE_KEYS) or env.reward_keys != ["reward"]:
            return "the env's done or reward keys are not torchrl's defaults"
        if env.action_keys != ["action"]:
            return "the env's action key is not 'action'"
        if not isinstance(env.action_spec, (OneHot, Categorical, Bounded, Unbounded)):
            return f"the env's action spec is a {type(env.action_spec).__name__}"
        if getattr(env.action_spec, "use_register", False):
            return "the env's one-hot action spec uses a register"
        options = {
            "replay_buffer": self.replay_buffer is not None,
            "postproc": self.postproc is not None,
            "split_trajs": self.split_trajs,
            "reset_at_each_iter": self.reset_at_each_iter,
            "interruptor": self.interruptor is not None,
            "set_truncated": bool(self._truncated_keys),
            "track_traj_ids=False": not self.track_traj_ids,
            "use_buffers=False": not self._use_buffers,
            "compiled or cudagraphed policy": self.compiled_policy or self.cudagraphed_policy,
            "device casts": self._cast_to_policy_device or self._cast_to_env_device,
            "storing_device": self.storing_device not in (None, torch.device("cpu")),
        }
        used = [name for name, on in options.items() if on]
        if used:
            return f"the collector uses {', '.join(used)}"
        written = {
            *reader.keys, *DONE_KEYS, TRAJ_IDS_KEY, *self._policy_output_keys,
            *(("next", k) for k in reader.keys), ("next", "reward"),
            *(("next", k) for k in DONE_KEYS),
            *transforms.keys, *(("next", k) for k in transforms.keys),
        }  # fmt: skip
        self._packed_keys = sorted(written - set(DONE_KEYS), key=str)  # the leaves steps write
        missing = set(self._final_rollout.keys(True, True)) - written
        if missing:
            return (
                f"the batch has keys the lean rollout does not write: {sorted(map(str, missing))}"
            )
        return None

    @torch.no_grad()
    def rollout(self) -> TensorDictBase:
        """One batch: the lean loop where it applies (see the module), else torchrl's ``rollout``."""
        if self.lean_reason is not None:
            return super().rollout()
        if self.pre_collect_hook is not None:
            self.pre_collect_hook()
        with set_exploration_type(self.exploration_type):
            return self._lean_rollout()

    def _lean_rollout(self) -> TensorDictBase:
        env, out, transforms = self._base_env, self._final_rollout, self._transforms
        steps, call_policy = env_steps(env), self._policy_call()
        if can_stage(self, steps, call_policy):  # the bookkeeping once per batch: staged.py
            return staged_rollout(self, steps, call_policy)
        batch_dims = env.batch_size
        time_dim = len(batch_dims)
        # one view per (key, step) of torchrl's preallocated batch, made in one call per key
        rows = {key: out.get(key).unbind(time_dim) for key in out.keys(True, True)}
        # the env's flags go straight from numpy into numpy views of the batch's bool rows
        flags = {key: out.get(("next", key)).numpy() for key in DONE_KEYS}
        at_step = (slice(None),) * time_dim  # + (t,): one step of every env copy
        flag_shape = (
            out.get(("next", "done")).shape[:time_dim]
            + out.get(("next", "done")).shape[time_dim + 1 :]
        )
        policy_keys = [k for k in self._policy_output_keys if k != TRAJ_IDS_KEY]
        for key in DONE_KEYS:  # a carrier's done keys are always False after step_and_maybe_reset
            out.get(key).zero_()
        obs_keys = self._observations.keys
        obs = {key: self._carrier.get(key) for key in obs_keys}
        traj_ids = self._carrier.get(TRAJ_IDS_KEY)
        state = transforms.initial(self._carrier)  # RewardSum / StepCounter entries
        falses = {
            key: torch.zeros(env.full_done_spec[key].shape, dtype=torch.bool) for key in DONE_KEYS
        }
        # a policy that may read (or write) the done flags gets fresh ones each step, as
        # torchrl's carrier holds; the module of a plain policy that does not read them, none
        reads = getattr(call_policy, "reads", DONE_KEYS)
        step_falses = falses if set(DONE_KEYS) & set(reads) else {}
        to_gym, read_obs = action_to_gym(env), self._observations.read
        hook, env_frames = self.step_hook, max(1, int(batch_dims.numel()))
        before = self.before_step
        reward_dtype, reward_shape = env.reward_spec.dtype, env.reward_spec.shape
        # a one-call NEXT_STEP env: which (copy, step) frames are transitions (not reset steps)
        pads = isinstance(steps, NextStepSteps)
        valid = torch.ones(out.batch_size, dtype=torch.bool) if pads else None
        for t in range(self.frames_per_batch):
            if before is not None:
                before()
            inputs = {
                **obs,
                TRAJ_IDS_KEY: traj_ids,
                **{k: v.clone() for k, v in step_falses.items()},
                **state,
            }
            if self._should_use_random_frames():
                # torchrl's env.rand_action: the policy does not run and writes nothing else
                outputs, written = {"action": self._random_action()}, ("action",)
            else:
                outputs, written = call_policy(inputs), policy_keys
            for key in obs_keys:
                rows[key][t].copy_(obs[key])
            rows[TRAJ_IDS_KEY][t].copy_(traj_ids)
            for key, value in state.items():
                rows[key][t].copy_(value)
            for key in written:
                rows[key][t].copy_(outputs[key])
            next_obs, reward, terminated, truncated = steps.step(to_gym(outputs["action"]))
            if hook is not None:
                hook(env_frames)
            reward = torch.as_tensor(reward, dtype=reward_dtype).reshape(reward_shape)
            next_state, reward, next_obs = transforms.step(state, reward, read_obs(next_obs))
            truncated = transforms.truncate(next_state, truncated)  # StepCounter's max_steps
            if valid is not None and steps.reset_step.any():  # no transition: the state stays
                reset_step = torch.from_numpy(steps.reset_step).reshape(batch_dims)
                valid[(*at_step, t)] = ~reset_step
                next_state = {k: _where(reset_step, state[k], v) for k, v in next_state.items()}
            ended = np.asarray(terminated | truncated)  # (| of two 0-d arrays is a scalar)
            for key, value in zip(DONE_KEYS, (ended, terminated, truncated), strict=True):
                flags[key][(*at_step, t)] = value.reshape(flag_shape)
            values = {
                **{("next", key): value for key, value in next_obs.items()},
                ("next", "reward"): reward,
                **{("next", key): value for key, value in next_state.items()},
            }
            for key, value in values.items():
                if key in rows:  # compact_obs: torchrl's batch has no ("next", obs)
                    row = rows[key][t]
                    row.copy_(value.reshape(row.shape))
            done = torch.from_numpy(ended).reshape(batch_dims)
            obs, traj_ids = self._reset_done(steps, done, next_obs, traj_ids)
            state = transforms.reset(next_state, done)
        self._carrier = self._as_carrier(
            {
                **obs,
                TRAJ_IDS_KEY: traj_ids,
                **{k: v.clone() for k, v in falses.items()},
                **state,
            }
        )
        if valid is not None:
            pack_transitions(out, valid, time_dim, keys=self._packed_keys)
        return out

    def _random_action(self) -> torch.Tensor:
        """One random action per env copy, drawn as torchrl's random frames draw it."""
        return self.env.rand_action(TensorDict(batch_size=self.env.batch_size)).get("action")

    def _as_carrier(self, inputs: dict[Any, torch.Tensor]) -> TensorDictBase:
        """torchrl's carrier (what its policy reads) from the lean loop's entries."""
        td = TensorDict(batch_size=self.env.batch_size)
        for key, value in inputs.items():
            td.set(key, value)
        return td

    def _policy_call(self) -> Any:
        """``inputs -> outputs`` (dicts of tensors by key) for this batch's policy calls.

        (:func:`~tdscheme.rollout.module_calls.policy_call`: a plain
        ``TensorDictModule``'s module called directly, any other policy on a carrier.)
        """
        readable = {*self._observations.keys, TRAJ_IDS_KEY, *DONE_KEYS}
        return policy_call(self._wrapped_policy, readable, self._as_carrier)

    def _reset_done(
        self,
        steps: EnvSteps | SubEnvSteps | EnvPoolSteps | NextStepSteps,
        done: torch.Tensor,
        obs: dict[str, torch.Tensor],
        traj_ids: torch.Tensor,
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """Resets the copies whose episode ended, as torchrl's ``step_and_maybe_reset``.

        An env that resets itself (EnvPool, ``NEXT_STEP``) gets no call: the step's
        observations, read (stateless transforms only), are the next step's.

        Returns:
            The next step's observations and trajectory ids.
        """
        if not done.any():
            return obs, traj_ids
        if not steps.resets_itself:
            reset_obs = steps.reset(done.reshape(-1).numpy())
            reset_obs = self._transforms.observe_reset(self._observations.read(reset_obs), done)
            if self._transforms.stateful and not done.all():
                # the other copies keep the step's observations, as torchrl's _update_during_reset
                # (recomputed: a VecNorm's would see its updated statistics, a CatFrames' the same)
                reset_obs = {k: _where(done, value, obs[k]) for k, value in reset_obs.items()}
            obs = reset_obs
        new_ids = self._traj_pool.get_traj_and_increment(int(done.sum()), device=traj_ids.device)
        traj_ids = traj_ids.masked_scatter(done, new_ids).reshape(traj_ids.shape)
        return obs, traj_ids
