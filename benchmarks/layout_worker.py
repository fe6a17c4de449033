"""The hand-written Ray collector's worker, returning torchrl's layout of a batch by hand.

``benchmarks/peers.py``'s :class:`~peers.MinimalCollectorWorker` is the numpy floor (the
observations, actions, rewards and flags a loop has to keep); a torchrl user's collector
owes more per frame: the next observations beside the observations (the final one where
an episode ended), one-hot actions, three flags and no transition at a NEXT_STEP env's
reset steps. :class:`MinimalLayoutWorker` writes that by hand, in numpy, so that a
benchmark can tell what torchrl's layout costs apart from what a collector adds to it.
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
    """

    def __init__(self, env_id: str, num_envs: int, frames_per_batch: int, **kwargs: Any) -> None:
        if num_envs < 2:
            raise ValueError(f"num_envs={num_envs}: the layout worker steps vector envs (> 1)")
        super().__init__(env_id, num_envs, frames_per_batch, **kwargs)  # its next_step, ended

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
        one_hot = np.eye(int(self.env.single_action_space.n), dtype=np.int64)[action]
        return {
            "observation": rows(obs), "action": rows(one_hot), "done": zeros,
            "terminated": zeros.copy(), "truncated": zeros.copy(),
            "next/observation": rows(next_obs), "next/reward": rows(reward[..., None]),
            "next/done": rows((terminated | truncated)[..., None]),
            "next/terminated": rows(terminated[..., None]),
            "next/truncated": rows(truncated[..., None]), "mask": rows(valid),
        }  # fmt: skip
