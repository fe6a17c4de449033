"""The lean rollout's staged loop: per step only what must be per step, the bookkeeping once per batch.

Step by step, only the policy's call, the env's call and what the next step
reads must happen in order. :func:`staged_rollout` does only that per step (the
policy's outputs and the next observations written into torchrl's
preallocated batch, the env's rewards and flags into numpy arrays; the loop's
reset of the copies that ended, where the env does not reset them itself) and
does the rest once per batch, in whole-batch operations:

* each step's observations: the previous step's next observations (one copy
  per key), the first step's those the batch started from, a step after a
  reset the reset's (EnvPool and a one-call ``NEXT_STEP`` env reset by
  themselves: their next observations are already the next step's); a
  ``SyncVectorEnv``'s copies stepped one by one observing one array have those
  rows written step by step from the stepper's own array instead
  (:func:`_direct_rows`), the pixel case's cheapest;
* the ``done`` / ``terminated`` / ``truncated`` flags and the rewards, with the
  env's reward transforms (``RewardScaling``, ``RewardClipping``, the cast of
  ``DoubleToFloat``) applied to all of them at once;
* ``RewardSum`` / ``StepCounter``: one pass over the batch's steps on numpy
  arrays of the copies (``prev + reward``, ``count + 1``, zeroed after an
  episode ends, held through a reset step: torchrl's arithmetic in torchrl's
  order, so the values are the same bit for bit);
* the trajectory ids: the pool's new ids handed out in (step, copy) order, as
  one call per step hands them out;
* a one-call ``NEXT_STEP`` env's reset steps packed out
  (:func:`~tdscheme.rollout.env_steps.pack_transitions`).

It runs where :func:`can_stage` says so: a policy that reads only
observations (its ``in_keys``; a plain ``TensorDictModule``'s module is called
directly, any other TensorDict module on the observations), no random frames
in the batch, and transforms whose
per-batch form is the per-step one (:meth:`EpisodeTransforms.batchable
<tdscheme.rollout.transforms.EpisodeTransforms.batchable>`). Its batches are
the per-step lean loop's frame for frame (``tests/rollout/test_staged.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from tdscheme.keys import DONE_KEYS, TRAJ_IDS_KEY
from tdscheme.rollout.env_steps import (
    NextStepSteps,
    SubEnvSteps,
    action_to_gym,
    pack_transitions,
)
from tdscheme.transport.next_fold import MIN_FRAME_BYTES, frame_bytes, note_differences

__all__ = ["can_stage", "staged_rollout"]


def can_stage(collector: Any, steps: Any, call_policy: Any) -> bool:
    """Whether the staged loop runs this batch of a ``LeanCollector`` (see the module)."""
    # a plain module's inputs (the direct call), else the policy's in_keys (a TensorDict call)
    reads = getattr(call_policy, "reads", None) or getattr(
        collector._wrapped_policy, "in_keys", None
    )
    return (
        reads is not None
        and set(reads) <= set(collector._observations.keys)
        and collector._transforms.batchable
        and not collector._should_use_random_frames()
    )


def staged_rollout(collector: Any, steps: Any, call_policy: Any) -> TensorDictBase:
    """One batch of ``collector`` (a ``LeanCollector``) through the staged loop (see the module).

    Args:
        collector: the collector; its carrier (what the batch starts from) is updated.
        steps: its env's stepper (:func:`~tdscheme.rollout.env_steps.env_steps`).
        call_policy: the direct call of its policy (``inputs -> outputs`` by key).
    """
    env, out, transforms = collector._base_env, collector._final_rollout, collector._transforms
    n, steps_per_batch = max(1, int(env.batch_size.numel())), collector.frames_per_batch
    time_dim = len(env.batch_size)
    obs_keys = collector._observations.keys
    policy_keys = [k for k in collector._policy_output_keys if k != TRAJ_IDS_KEY]
    first = {key: collector._carrier.get(key) for key in obs_keys}
    state = {key: collector._carrier.get(key) for key in transforms.keys}
    next_obs, next_obs_rows, arrays, policy_rows = _rows(collector, out, obs_keys, policy_keys)
    row_shapes = {key: rows[0].shape for key, rows in next_obs_rows.items()}
    direct = _direct_rows(out, steps, arrays, obs_keys, time_dim)
    terminated = np.zeros((steps_per_batch, n), dtype=bool)
    truncated = np.zeros((steps_per_batch, n), dtype=bool)
    pads = isinstance(steps, NextStepSteps)
    held = np.zeros((steps_per_batch, n), dtype=bool) if pads else None
    rewards: np.ndarray | None = None
    to_gym, normalize = action_to_gym(env), transforms.normalize
    read_obs = collector._observations.read
    before, hook = collector.before_step, collector.step_hook
    resets = not steps.resets_itself
    # step -> the copies reset before it and their reset observations (the others start
    # from their step's next observations, as torchrl's _update_during_reset keeps them)
    starts: dict[int, tuple[torch.Tensor, dict[str, torch.Tensor]]] = {}
    obs = first
    for t in range(steps_per_batch):
        if before is not None:
            before()
        outputs = call_policy(obs)
        for key in policy_keys:  # copied now: a policy may write its next outputs in place
            policy_rows[key][t].copy_(outputs[key])
        if direct is not None:  # the stepper's own array (see _direct_rows)
            raw_obs, reward, term, trunc = steps.step_in_place(to_gym(outputs["action"]))
        else:
            raw_obs, reward, term, trunc = steps.step(to_gym(outputs["action"]))
        if hook is not None:
            hook(n)
        if rewards is None:  # the env's own dtype: cast once per batch, as once per step
            rewards = np.zeros((steps_per_batch, n), dtype=np.asarray(reward).dtype)
        if np.shape(reward) == (n,) and np.shape(term) == (n,) and np.shape(trunc) == (n,):
            rewards[t], terminated[t], truncated[t] = reward, term, trunc
        else:
            rewards[t] = np.reshape(reward, n)
            terminated[t] = np.reshape(term, n)
            truncated[t] = np.reshape(trunc, n)
        if held is not None:
            held[t] = steps.reset_step
        if direct is not None:  # step t + 1's row now: no shifted copy, no reset copy
            ended = terminated[t] | truncated[t]
            _next_inputs(steps, raw_obs, arrays.views[t], direct, t, ended)
            obs = read_obs(raw_obs)  # the policy reads the stepper's array, as per step
            if t + 1 < steps_per_batch and ended.any():
                starts[t + 1] = (torch.from_numpy(ended).reshape(env.batch_size), None)
            continue
        if arrays is not None and type(raw_obs) is np.ndarray and raw_obs.shape == arrays.shape:
            arrays.views[t][...] = raw_obs
            obs = read_obs(raw_obs)  # the policy reads the reader's tensor, as torchrl's
        else:
            obs = normalize(read_obs(raw_obs))
            for key in obs_keys:
                next_obs_rows[key][t].copy_(obs[key].reshape(row_shapes[key]))
        if resets and (terminated[t].any() or truncated[t].any()):
            # reset as torchrl's step_and_maybe_reset: the next step starts from its observations
            ended = terminated[t] | truncated[t]
            obs = normalize(read_obs(steps.reset(ended)))
            if t + 1 < steps_per_batch:  # the reset copies' rows (a mask's index: a copy)
                reset = torch.from_numpy(ended).reshape(env.batch_size)
                starts[t + 1] = (reset, {k: obs[k].reshape(row_shapes[k])[reset] for k in obs_keys})
    done = terminated | truncated
    _write_observations(out, first, next_obs, time_dim, shifted=direct is None)
    for t, (reset, started) in starts.items():  # the reset copies start from their reset
        for key, value in (started or {}).items():
            out.get(key).select(time_dim, t)[reset] = value
    for key, value in (("done", done), ("terminated", terminated), ("truncated", truncated)):
        _write(out, ("next", key), torch.from_numpy(value), n)
        out.get(key).zero_()  # a carrier's done keys are always False after step_and_maybe_reset
    reward = torch.from_numpy(rewards).to(env.reward_spec.dtype)
    roots, nexts, reward, state = transforms.run_batch(state, reward, done, held)
    _write(out, ("next", "reward"), reward, n)
    for key in transforms.keys:
        _write(out, key, roots[key], n)
        _write(out, ("next", key), nexts[key], n)
    ids = _traj_ids(collector, done, out, n)
    collector._carrier = collector._as_carrier(
        {
            **{key: value.clone() for key, value in obs.items()},  # a view of the batch
            TRAJ_IDS_KEY: ids,
            **{k: torch.zeros(env.full_done_spec[k].shape, dtype=torch.bool) for k in DONE_KEYS},
            **state,
        }
    )
    if held is not None:
        valid = ~torch.from_numpy(held).T.reshape(out.batch_size)
        pack_transitions(out, valid, time_dim, keys=collector._packed_keys)
    else:
        _note_differences(out, next_obs, starts, n, steps_per_batch, time_dim)
    return out


def _note_differences(
    out: TensorDictBase,
    next_obs: dict[str, torch.Tensor | None],
    starts: dict,
    n: int,
    steps: int,
    time_dim: int,
) -> None:
    """Tells the wire where each ``("next", key)`` leaf differs from ``key`` one step on.

    By construction: step ``t + 1``'s observations are a copy of step ``t``'s next
    ones, except for the copies reset before ``t + 1`` (``starts``). A folding codec
    (:mod:`tdscheme.transport.next_fold`) then skips its bitwise comparison.
    """
    # compact_obs has no ("next", key) leaf; a leaf of small frames is never folded
    noted = {
        key: nxt
        for key, nxt in next_obs.items()
        if nxt is not None and frame_bytes(nxt, time_dim + 1) >= MIN_FRAME_BYTES
    }
    if not noted:
        return
    differ = torch.zeros(n, max(steps - 1, 0), dtype=torch.bool)
    for t, (reset, _) in starts.items():
        differ[:, t - 1] = reset.reshape(n)
    for key, nxt in noted.items():
        note_differences(out.get(key), nxt, differ)


def _rows(
    collector: Any, out: TensorDictBase, obs_keys: list[str], policy_keys: list[Any]
) -> tuple:
    """``(next_obs, their rows, _ArrayRows or None, the policy outputs' rows)`` of ``out``.

    Views of the batch buffer, made once per buffer: torchrl's collector reuses
    its batch buffer, and the views stay valid while its tensors are the same
    objects (checked every batch; a replaced tensor gets new views).
    """
    time_dim = len(collector._base_env.batch_size)
    tensors = [out.get(key) for key in policy_keys] + [out.get(key) for key in obs_keys]
    tensors += [out.get(("next", key), None) for key in obs_keys]
    kept = collector.__dict__.get("_staged_rows")
    if (
        kept is not None
        and kept[0] is out
        and all(a is b for a, b in zip(kept[1], tensors, strict=True))
    ):
        return kept[2]
    next_obs = {key: out.get(("next", key), None) for key in obs_keys}
    next_obs_rows = {key: _next_rows(collector, out, key, time_dim) for key in obs_keys}
    # a plain array observation goes from the env's numpy array straight into its next-step
    # row (numpy's cast); the next policy call reads the reader's tensor of it (see _array_rows)
    arrays = _array_rows(collector, next_obs_rows, obs_keys, collector._transforms)
    policy_rows = {key: out.get(key).unbind(time_dim) for key in policy_keys}
    views = (next_obs, next_obs_rows, arrays, policy_rows)
    collector._staged_rows = (out, tensors, views)
    return views


class _ArrayRows:
    """Where a plain array observation's steps go: numpy views of its rows (see :func:`_array_rows`)."""

    def __init__(self, rows: tuple[torch.Tensor, ...]) -> None:
        self.views = [row.numpy() for row in rows]
        self.shape = tuple(rows[0].shape)


def _array_rows(
    collector: Any, rows: dict[str, tuple[torch.Tensor, ...]], obs_keys: list[str], transforms: Any
) -> _ArrayRows | None:
    """The rows one plain array observation is written into by numpy, or ``None``.

    Where the env observes one array (no gymnasium ``Dict``) that no transform
    rewrites, numpy's assignment does the reader's cast (``torch.as_tensor(value,
    dtype)``: the same values) into the batch's next-step row. The next policy
    call reads the reader's tensor of the same array, not that row: its layout
    is the env's (CartPole's vector env returns a column-major array), and a
    matrix product may round another layout differently, so that only the
    reader's gives torchrl's actions bit for bit. A step whose array has
    another shape or type goes through the reader and a copy, as before.
    """
    reader = collector._observations
    if len(obs_keys) != 1 or reader.gym_keys or transforms.normalized_keys:
        return None
    try:
        return _ArrayRows(rows[obs_keys[0]])
    except (TypeError, RuntimeError):  # a dtype numpy has no view of (bfloat16, ...)
        return None


def _direct_rows(
    out: TensorDictBase, steps: Any, arrays: _ArrayRows | None, obs_keys: list[str],
    time_dim: int,
) -> list[np.ndarray] | None:  # fmt: skip
    """The rows of ``key`` from step 1 on, where the steps copy their next inputs, or ``None``.

    For a ``SyncVectorEnv``'s copies stepped one by one (:class:`SubEnvSteps`) observing
    one plain array of the batch's dtype: the copies write into the stepper's own array;
    it is copied into the batch's ``("next", key)`` row (the final observations), the
    ended copies' reset observations are written into it, and it is copied into the next
    step's ``key`` row; the next policy call reads the array itself, as it read the
    stepper's copy before. Three writes of a frame (the layout holds it twice), none into
    fresh memory, instead of five: the stepper's array, its copy, the row, the shifted
    copy and, at a reset, the reset's copy. Under ``compact_obs`` (no ``("next", key)``)
    only the second copy.
    """
    if arrays is None or not isinstance(steps, SubEnvSteps):
        return None
    if not steps.can_step_in_place(arrays.views[0]):
        return None
    if out.get(("next", obs_keys[0]), None) is None:  # compact_obs: arrays are key's rows
        return arrays.views[:-1]
    return [row.numpy() for row in out.get(obs_keys[0]).unbind(time_dim)[1:]]


def _next_inputs(
    steps: Any, stepped: np.ndarray, next_row: np.ndarray, rows: list[np.ndarray], t: int,
    ended: np.ndarray,
) -> None:  # fmt: skip
    """Step ``t``'s final observations into ``next_row`` (if a leaf's: not ``rows[t]``), the
    resets into the stepper's array ``stepped``, and that into step ``t + 1``'s row."""
    last = t == len(rows)  # the last step's next inputs: the carrier's (cloned from stepped)
    if last or next_row is not rows[t]:
        np.copyto(next_row, stepped)
    if ended.any():
        steps.reset_in_place(ended)
    if not last:
        np.copyto(rows[t], stepped)


def _time_last(value: torch.Tensor, n: int) -> torch.Tensor:
    """``[*env dims, time, ...]`` as ``[copies, time]`` (one value per frame), a view."""
    return value.view(n, -1)


def _write(out: TensorDictBase, key: Any, value: torch.Tensor, n: int) -> None:
    """``value`` (``[steps, copies]``) into the batch's ``key``, where the batch has it.

    (torchrl's ``compact_obs`` batch leaves some ``"next"`` entries out.)
    """
    leaf = out.get(key, None)
    if leaf is not None:
        _time_last(leaf, n).copy_(value.T)


def _next_rows(collector: Any, out: TensorDictBase, key: str, time_dim: int) -> tuple:
    """Where each step's next observations go: the rows of the batch's ``("next", key)``.

    Under ``compact_obs`` torchrl's batch has no such leaf: a step's next
    observations go straight into the next step's row of ``key`` (what
    :func:`_write_observations` would copy there), the last step's into a kept row
    (the carrier's).
    """
    leaf = out.get(("next", key), None)
    if leaf is not None:
        return leaf.unbind(time_dim)
    rows = out.get(key).unbind(time_dim)
    kept = collector.__dict__.setdefault("_staged_last_obs", {})
    like = rows[-1]
    if key not in kept or kept[key].shape != like.shape or kept[key].dtype != like.dtype:
        kept[key] = torch.empty_like(like)
    return (*rows[1:], kept[key])


def _write_observations(
    out: TensorDictBase,
    first: dict[str, torch.Tensor],
    next_obs: dict[str, torch.Tensor],
    time_dim: int,
    shifted: bool = True,
) -> None:
    """Each step's observations: the first step's ``first``, then the step before's next ones.

    (A ``None`` in ``next_obs``, ``compact_obs``, or ``shifted=False``: the steps wrote
    their rows already.)
    """
    for key, nxt in next_obs.items():
        rows = out.get(key)
        steps = rows.shape[time_dim]
        head = rows.select(time_dim, 0)
        head.copy_(first[key].reshape(head.shape))
        if steps > 1 and nxt is not None and shifted:
            rows.narrow(time_dim, 1, steps - 1).copy_(nxt.narrow(time_dim, 0, steps - 1))


def _traj_ids(collector: Any, done: np.ndarray, out: TensorDictBase, n: int) -> torch.Tensor:
    """Writes each frame's trajectory id; returns the ids the next batch starts from.

    A copy's id changes at the step after its episode ended, to the pool's next
    id; ids are handed out in (step, copy) order, as one pool call per step does:
    the ``k``-th episode end of the batch in that order gets the ``k``-th id of one
    pool call. (numpy: a tenth of the torch calls' cost on a batch's few thousand flags.)
    """
    carried = collector._carrier.get(TRAJ_IDS_KEY)
    start = carried.reshape(n).numpy()
    rows = _time_last(out.get(TRAJ_IDS_KEY), n)
    # in (step, copy) order: k at the k-th episode end
    ends = np.cumsum(done, axis=None).reshape(done.shape)
    count = int(ends[-1, -1]) if done.size else 0
    if count == 0:
        rows.copy_(torch.from_numpy(start)[:, None].expand_as(rows))
        return carried
    given = collector._traj_pool.get_traj_and_increment(count).numpy()
    last = np.maximum.accumulate(np.where(done, ends, 0), axis=0)  # the latest end <= t, 0: none
    ids = np.empty(done.shape, dtype=start.dtype)
    ids[0] = start
    ids[1:] = np.where(last[:-1] > 0, given[last[:-1] - 1], start)  # the id after the end < t
    rows.copy_(torch.from_numpy(ids).T)
    final = np.where(last[-1] > 0, given[last[-1] - 1], start)
    return torch.from_numpy(final).reshape(carried.shape)
