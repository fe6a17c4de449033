"""The hand-written Ray collector's worker, returning torchrl's layout of a batch by hand.

``benchmarks/peers.py``'s :class:`~peers.MinimalCollectorWorker` is the numpy floor (the
observations, actions, rewards and flags a loop has to keep); a torchrl user's collector
owes more per frame: the next observations beside the observations (the final one where
an episode ended), one-hot actions, three flags and no transition at a NEXT_STEP env's
reset steps. :class:`MinimalLayoutWorker` writes that by hand, in numpy, so that a
benchmark can tell what torchrl's layout costs apart from what a collector adds to it.
:class:`TdschemeLayoutWorker` adds what a tdscheme worker's batch holds beyond torchrl's
layout: each row's transitions packed to its front, trajectory ids and the per-frame stamps.
Only numpy, torch and gymnasium are imported (as ``peers``), so its actors start fast.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from peers import MinimalCollectorWorker  # benchmarks/ is on the workers' sys.path


class MinimalLayoutWorker(MinimalCollectorWorker):
    """:class:`MinimalCollectorWorker` returning torchrl's layout of a batch, as numpy arrays.

    What a collector owes a torchrl user beyond the numpy floor, written by hand: per
    batch ``[num_envs, steps]`` arrays of ``observation``, a one-hot ``action``, the
    root ``done`` / ``terminated`` / ``truncated``, and under ``next`` the
    ``observation`` (the final one where an episode ended), ``reward``, ``done``,
    ``terminated`` and ``truncated`` (trailing dims of 1, as torchrl's specs), plus
    ``mask``: ``False`` at a NEXT_STEP env's reset steps (the step after an episode
    ended, whose action the env ignores: no transition). Flat keys (``"next/reward"``),
    so that Ray moves the arrays out of band as it does the plain worker's. The row
    bounds what a torchrl-layout collector can reach on an env, beside the plain
    worker's numpy floor. Vector envs only.

    Args:
        env_id, num_envs, frames_per_batch, seed, autoreset_mode, pixels,
            vectorization_mode: as :class:`MinimalCollectorWorker` (``num_envs > 1``).
        index_actions: ``action`` as the action's index (a categorical action spec's
            layout, ``[num_envs, steps]``) instead of one-hot.
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        frames_per_batch: int,
        index_actions: bool = False,
        **kwargs: Any,
    ) -> None:
        if num_envs < 2:
            raise ValueError(f"num_envs={num_envs}: the layout worker steps vector envs (> 1)")
        super().__init__(env_id, num_envs, frames_per_batch, **kwargs)  # its next_step, ended
        self.index_actions = index_actions

    def next(self) -> dict[str, np.ndarray]:
        """Collects one batch and lays it out as torchrl's collectors do (see the class)."""
        steps, n = self.steps, self.num_envs
        obs = np.empty((steps, *np.shape(self.obs)), dtype=self.obs_dtype)
        next_obs = np.empty_like(obs)
        action = np.empty((steps, n), dtype=np.int64)
        reward = np.empty((steps, n), dtype=np.float32)
        terminated = np.empty((steps, n), dtype=bool)
        truncated = np.empty((steps, n), dtype=bool)
        valid = np.ones((steps, n), dtype=bool)
        with torch.no_grad():
            for t in range(steps):
                obs[t] = self.obs
                act = self.net(torch.as_tensor(obs[t])).argmax(-1).numpy()
                action[t] = act
                self.obs, reward[t], terminated[t], truncated[t], info = self.env.step(act)
                next_obs[t] = self.obs
                done = terminated[t] | truncated[t]
                if self.next_step:
                    valid[t] = ~self.ended
                    self.ended = done
                elif done.any():
                    if (
                        self.reset_mask
                    ):  # DISABLED: the ended copies reset now, the others keep theirs
                        self.obs, _ = self.env.reset(options={"reset_mask": done.copy()})
                    else:  # SAME_STEP: the step returned the reset observation
                        next_obs[t][done] = np.stack(info["final_obs"][done])

        def rows(x: np.ndarray) -> np.ndarray:  # [steps, envs, ...] -> [envs, steps, ...]
            return np.ascontiguousarray(np.swapaxes(x, 0, 1))

        zeros = np.zeros((n, steps, 1), dtype=bool)
        if not self.index_actions:
            action = np.eye(int(self.env.single_action_space.n), dtype=np.int64)[action]
        return {
            "observation": rows(obs), "action": rows(action), "done": zeros,
            "terminated": zeros.copy(), "truncated": zeros.copy(),
            "next/observation": rows(next_obs), "next/reward": rows(reward[..., None]),
            "next/done": rows((terminated | truncated)[..., None]),
            "next/terminated": rows(terminated[..., None]),
            "next/truncated": rows(truncated[..., None]), "mask": rows(valid),
        }  # fmt: skip


#: the per-frame stamps of a tdscheme batch (one value a batch each), by flat key
STAMPS = ("collector/worker_id", "collector/policy_version", "collector/env_config_version",
          "collector/env_task")  # fmt: skip


class TdschemeLayoutWorker(MinimalLayoutWorker):
    """:class:`MinimalLayoutWorker` returning what a tdscheme worker's batch holds, by hand in numpy.

    Beyond torchrl's layout: each env copy's row holds its transitions first, in order,
    and zeros behind them (``mask`` marks the transitions: ``False`` at a NEXT_STEP env's
    reset steps, moved to the row's end); ``collector/traj_ids`` (a copy's id changes at
    the step after its episode ended, new ids handed out in (step, copy) order, as one
    counter for the worker); the four stamps of :data:`STAMPS` per frame (``int64``);
    and the check that every floating-point leaf is finite, as a worker makes before
    it sends a batch. What a tdscheme worker adds beyond this is the framework's own
    cost: a benchmark row against this worker tells it apart from the layout's.

    Args:
        env_id, num_envs, frames_per_batch, index_actions, seed, autoreset_mode, pixels,
            vectorization_mode: as :class:`MinimalLayoutWorker`.
    """

    def __init__(self, env_id: str, num_envs: int, frames_per_batch: int, **kwargs: Any) -> None:
        super().__init__(env_id, num_envs, frames_per_batch, **kwargs)
        self.worker_id = kwargs.get("seed", 0)
        self.traj_ids = np.arange(num_envs, dtype=np.int64)  # each copy's running id
        self.next_traj_id = num_envs

    def next(self) -> dict[str, np.ndarray]:
        """Collects one batch, laid out as a tdscheme worker's (see the class)."""
        batch = super().next()
        valid = batch["mask"]  # [envs, steps]
        rows, steps = valid.shape
        ids = self._ids(batch["next/done"].reshape(rows, steps))
        place = np.cumsum(valid, axis=1) - 1  # a transition's column once packed
        source = np.flatnonzero(valid)
        target = source - source % steps + place.reshape(-1)[source]
        out = {"mask": np.arange(steps) < valid.sum(1)[:, None]}
        for key, value in {**batch, "collector/traj_ids": ids}.items():
            if key in ("done", "terminated", "truncated"):  # the root flags: all False, unmoved
                out[key] = value
            elif key != "mask":  # (packed above)
                flat = value.reshape(rows * steps, *value.shape[2:])
                packed = np.zeros_like(flat)
                packed[target] = flat[source]
                out[key] = packed.reshape(value.shape)
        stamped = (self.worker_id, 0, 0, -1)  # a fresh worker's version, config and no task
        for key, value in zip(STAMPS, stamped, strict=True):
            out[key] = np.full((rows, steps), value, dtype=np.int64)
        for key, value in out.items():
            if value.dtype.kind == "f" and not np.isfinite(value).all():
                raise ValueError(f"{key} holds a NaN or an inf")
        return out

    def _ids(self, done: np.ndarray) -> np.ndarray:
        """``[envs, steps]`` trajectory ids of a batch whose episodes ended at ``done``."""
        by_step = done.T  # ids are handed out in (step, copy) order
        ends = np.cumsum(by_step, axis=None).reshape(by_step.shape)
        count = int(ends[-1, -1])
        given = np.arange(self.next_traj_id, self.next_traj_id + count, dtype=np.int64)
        self.next_traj_id += count
        last = np.maximum.accumulate(np.where(by_step, ends, 0), axis=0)  # 0: no end yet
        ids = np.empty(by_step.shape, dtype=np.int64)
        ids[0] = self.traj_ids
        ids[1:] = np.where(last[:-1] > 0, given[last[:-1] - 1], self.traj_ids)
        self.traj_ids = np.where(last[-1] > 0, given[last[-1] - 1], self.traj_ids)
        return np.ascontiguousarray(ids.T)
