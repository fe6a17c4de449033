"""Peers and limits that ``benchmarks/collection.py`` measures tdscheme against.

* torchrl's ``RayCollector``, built the way each section needs it, and its
  weight push;
* a hand-written Ray collector (plain actors stepping gymnasium envs with a
  plain torch MLP, numpy batches, a first-ready driver loop), the same loop
  in-process without Ray, and torchrl's single-process ``Collector``;
* the hand-written writer into a Ray-held torchrl replay buffer (the same actors,
  each writing its batches with the buffer client's ``extend``);
* the large-observation policy and env, and an actor that serves one ready batch
  so that its transfer across Ray can be timed alone;
* the deterministic 2x64 tanh MLP policy every collector runs (:func:`mlp_policy`).

Ray workers unpickle these by reference: a script in ``benchmarks/`` has this
directory on its workers' ``sys.path`` (Ray adds the driver script's directory); a tool in
``benchmarks/tools/`` puts it on their ``PYTHONPATH`` (``harness.benchmarks_on_pythonpath``).

Only numpy, torch, gymnasium and ray are imported at import time, so the
actors of the hand-written collector start without importing torchrl.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import ray
import torch
from torch import nn

#: Seconds any single blocking Ray call of the hand-written collector may take.
RAY_TIMEOUT_S = 120.0


def torch_mlp(obs_dim: int, action_dim: int, *, hidden: int = 64, depth: int = 2) -> nn.Module:
    """The layers of :func:`mlp_policy` (tanh MLP), returning logits.

    Args:
        obs_dim: observation size.
        action_dim: number of actions.
        hidden: hidden units per layer.
        depth: number of hidden layers.

    Returns:
        An ``nn.Sequential`` mapping observations to logits.
    """
    layers: list[nn.Module] = []
    size = obs_dim
    for _ in range(depth):
        layers += [nn.Linear(size, hidden), nn.Tanh()]
        size = hidden
    layers.append(nn.Linear(size, action_dim))
    return nn.Sequential(*layers)


class OneHotArgmax(nn.Module):
    """Turns logits into the one-hot action torchrl's discrete gym envs expect."""

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).to(torch.int64)


class Argmax(nn.Module):
    """Turns logits into the action index a categorical action spec expects."""

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.argmax(-1)


def mlp_policy(
    obs_dim: int,
    action_dim: int,
    *,
    hidden: int = 64,
    depth: int = 2,
    discrete: bool = True,
    index_actions: bool = False,
) -> Any:
    """A deterministic MLP policy: ``depth`` tanh layers of ``hidden`` units, greedy actions.

    Args:
        obs_dim: flat observation size.
        action_dim: number of actions (discrete: one-hot argmax) or action size.
        hidden: hidden units per layer.
        depth: number of hidden layers.
        discrete: one-hot argmax actions (CartPole) or tanh-bounded continuous ones.
        index_actions: discrete actions as indices (an env with
            ``categorical_action_encoding=True``), the hand-written collector's argmax.

    Returns:
        A ``TensorDictModule`` reading ``"observation"`` and writing ``"action"``.
    """
    from tensordict.nn import TensorDictModule

    head = (Argmax() if index_actions else OneHotArgmax()) if discrete else nn.Tanh()
    net = nn.Sequential(torch_mlp(obs_dim, action_dim, hidden=hidden, depth=depth), head)
    return TensorDictModule(net, in_keys=["observation"], out_keys=["action"])


def pixels_env(env_id: str, obs_shape: tuple[int, ...]) -> Any:
    """A torchrl env stepping ``env_id`` whose observations are uint8 frames of ``obs_shape``.

    It measures large-observation transport: the env's dynamics, pixel-sized batches
    (tdscheme's :class:`~tdscheme.envs.faulty.PixelsLikeObs`, imported here: it imports torchrl).
    """
    from torchrl.envs import GymWrapper

    from tdscheme.envs.faulty import PixelsLikeObs

    return GymWrapper(PixelsLikeObs(gym.make(env_id), obs_shape))


class PixelPolicyNet(nn.Module):
    """A tiny policy over uint8 frames: float-cast, flatten, one linear layer, one-hot argmax.

    It costs a few tens of microseconds per frame, so that moving the frames,
    not computing the action, dominates a large-observation collector.
    """

    def __init__(self, obs_shape: tuple[int, ...], action_dim: int) -> None:
        super().__init__()
        self.obs_ndim = len(obs_shape)
        self.linear = nn.Linear(int(np.prod(obs_shape)), action_dim)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        flat = obs.flatten(-self.obs_ndim).to(torch.float32).div_(255.0)
        logits = self.linear(flat)
        return nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).to(torch.int64)


def pixel_policy(obs_shape: tuple[int, ...], action_dim: int) -> Any:
    """A ``TensorDictModule`` around :class:`PixelPolicyNet` reading ``"observation"``."""
    from tensordict.nn import TensorDictModule

    return TensorDictModule(
        PixelPolicyNet(obs_shape, action_dim), in_keys=["observation"], out_keys=["action"]
    )


class ArgmaxIndex(nn.Module):
    """Logits to the action index (EnvPool's discrete actions are indices, not one-hot)."""

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.argmax(-1)


def index_mlp_policy(obs_dim: int, action_dim: int) -> Any:
    """The 2x64 tanh MLP of :func:`mlp_policy`, greedy, writing an action index."""
    from tensordict.nn import TensorDictModule

    net = nn.Sequential(torch_mlp(obs_dim, action_dim), ArgmaxIndex())
    return TensorDictModule(net, in_keys=["observation"], out_keys=["action"])


class PixelIndexPolicyNet(PixelPolicyNet):
    """:class:`PixelPolicyNet` writing the action index instead of a one-hot action."""

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        flat = obs.flatten(-self.obs_ndim).to(torch.float32).div_(255.0)
        return self.linear(flat).argmax(-1)


def pixel_index_policy(obs_shape: tuple[int, ...], action_dim: int) -> Any:
    """A ``TensorDictModule`` around :class:`PixelIndexPolicyNet` reading ``"observation"``."""
    from tensordict.nn import TensorDictModule

    return TensorDictModule(
        PixelIndexPolicyNet(obs_shape, action_dim), in_keys=["observation"], out_keys=["action"]
    )


class MinimalCollectorWorker:
    """Steps gymnasium envs with a plain torch MLP and returns numpy batches.

    No torchrl, no TensorDict: the floor of what a collector has to do.

    Args:
        env_id: a gymnasium id with a discrete action space (CartPole-v1).
        num_envs: ``1`` for one ``gym.make`` env, more for a synchronous
            vector env.
        frames_per_batch: frames per returned batch (a multiple of ``num_envs``).
        seed: env and policy seed.
        autoreset_mode: the vector env's (a ``gym.vector.AutoresetMode`` name):
            ``SAME_STEP`` (the default, the cheapest without torchrl), ``DISABLED``
            (the ended envs reset with ``reset_mask`` after the step, as any collector
            of such an env must) or ``NEXT_STEP`` (gymnasium's default: the env resets
            an ended env at its next step, ignoring its action: such a reset step is no
            transition, and the batch's ``mask`` marks it ``False``, so that
            ``harness.frames_in`` counts transitions, as it counts tdscheme's).
        pixels: a frame shape: each env observes uint8 frames of it instead
            (:func:`pixels_env`'s ``PixelsLikeObs``), and the policy is
            :class:`PixelPolicyNet`, as tdscheme's row's.
        vectorization_mode: ``gym.make_vec``'s: ``"sync"`` (a ``SyncVectorEnv``), or
            ``"vector_entry_point"`` (the env's own vector env, CartPole's
            ``CartPoleVectorEnv``, NEXT_STEP only: ``autoreset_mode`` is not passed).
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        frames_per_batch: int,
        seed: int = 0,
        autoreset_mode: str = "SAME_STEP",
        pixels: tuple[int, ...] | None = None,
        vectorization_mode: str = "sync",
    ) -> None:
        if frames_per_batch % num_envs:
            raise ValueError(
                f"frames_per_batch={frames_per_batch} must be a multiple of num_envs={num_envs}"
            )
        torch.set_num_threads(1)
        torch.manual_seed(0)
        self.num_envs = num_envs
        self.seed = seed
        self.steps = frames_per_batch // num_envs
        wrappers = []
        if pixels is not None:
            from tdscheme.envs.faulty import PixelsLikeObs

            wrappers = [functools.partial(PixelsLikeObs, shape=tuple(pixels))]
        if num_envs == 1:
            self.env: Any = gym.make(env_id)
            for wrap in wrappers:
                self.env = wrap(self.env)
        elif vectorization_mode == "vector_entry_point":
            self.env = gym.make_vec(
                env_id, num_envs=num_envs, vectorization_mode=vectorization_mode
            )
        else:
            self.env = gym.make_vec(
                env_id,
                num_envs=num_envs,
                vectorization_mode=vectorization_mode,
                vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode[autoreset_mode]},
                wrappers=wrappers,
            )
        self.reset_mask = num_envs > 1 and autoreset_mode == "DISABLED"
        native = vectorization_mode == "vector_entry_point"
        self.next_step = num_envs > 1 and (native or autoreset_mode == "NEXT_STEP")
        self.ended = np.zeros(num_envs, dtype=bool)  # envs whose next step is a reset step
        vector = num_envs > 1
        obs_space = self.env.single_observation_space if vector else self.env.observation_space
        action_space = self.env.single_action_space if vector else self.env.action_space
        if pixels is not None:
            self.net: nn.Module = PixelPolicyNet(tuple(pixels), int(action_space.n))
        else:
            self.net = torch_mlp(int(np.prod(obs_space.shape)), int(action_space.n))
        self.obs, _ = self.env.reset(seed=seed)
        self.obs_dtype = np.float32 if pixels is None else np.uint8

    def next(self) -> dict[str, np.ndarray]:
        """Collects one batch of ``frames_per_batch`` frames (time-major)."""
        shape = (self.steps,) if self.num_envs == 1 else (self.steps, self.num_envs)
        obs = np.empty((self.steps,) + np.shape(self.obs), dtype=self.obs_dtype)
        action = np.empty(shape, dtype=np.int64)
        reward = np.empty(shape, dtype=np.float32)
        done = np.empty(shape, dtype=bool)
        valid = np.empty(shape, dtype=bool) if self.next_step else None
        with torch.no_grad():
            for t in range(self.steps):
                obs[t] = self.obs
                logits = self.net(torch.as_tensor(obs[t]))
                if self.num_envs == 1:
                    act: Any = int(logits.argmax())
                else:
                    act = logits.argmax(-1).numpy()
                action[t] = act
                self.obs, reward[t], terminated, truncated, _ = self.env.step(act)
                done[t] = np.logical_or(terminated, truncated)
                if valid is not None:  # NEXT_STEP: a step after an episode ended resets
                    valid[t] = ~self.ended
                    self.ended = done[t]
                if self.num_envs == 1 and done[t]:
                    self.obs, _ = self.env.reset()
                elif self.reset_mask and done[t].any():
                    # the other copies' rows: the observations of the step
                    self.obs, _ = self.env.reset(options={"reset_mask": done[t].copy()})
        batch = {"observation": obs, "action": action, "reward": reward, "done": done}
        return batch if valid is None else {**batch, "mask": valid}

    def close(self) -> None:
        """Closes the env."""
        self.env.close()


class MinimalBufferWriter(MinimalCollectorWorker):
    """:class:`MinimalCollectorWorker` writing its batches into a Ray-held torchrl buffer.

    Each :meth:`next` collects one batch from the vector env (random actions from the
    action space while ``random_frames`` last, in whole batches as torchrl's collectors
    count them, then the MLP's greedy ones), writes it with the buffer client's ``extend``
    laid out as torchrl's collectors write a batched env's batch (``[num_envs, time]``:
    ``observation``, a one-hot ``action``, and under ``next`` the ``observation`` (the
    final one where an episode ended), ``reward``, ``done``, ``terminated`` and
    ``truncated``), and returns the number of frames written, not the batch.

    Args:
        env_id: as :class:`MinimalCollectorWorker`.
        num_envs: envs of the same-step auto-reset vector env (more than 1).
        frames_per_batch: frames per write (a multiple of ``num_envs``).
        seed: env, action-space and policy seed.
        buffer: a ``RayReplayBuffer.client()``.
        random_frames: frames of random actions before the policy acts.
        pixels: as :class:`MinimalCollectorWorker` (uint8 frames of that shape).
    """

    def __init__(self, *args: Any, buffer: Any, random_frames: int = 0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # env_id, num_envs, frames_per_batch, seed, pixels
        if self.num_envs < 2:
            self.close()
            raise ValueError(f"num_envs={self.num_envs}: the writer steps a vector env (2 or more)")
        self.buffer = buffer
        self.random_frames = random_frames
        self.env.action_space.seed(self.seed)

    def next(self) -> int:  # type: ignore[override]
        """Collects one batch, writes it into the buffer; returns its number of frames."""
        from tensordict import TensorDict

        shape = (self.num_envs, self.steps)  # env-major, as torchrl's batch
        obs = np.empty((*shape, *self.obs.shape[1:]), dtype=self.obs_dtype)
        next_obs = np.empty_like(obs)
        action = np.empty(shape, dtype=np.int64)
        reward = np.empty(shape, dtype=np.float32)
        terminated = np.empty(shape, dtype=bool)
        truncated = np.empty(shape, dtype=bool)
        random = self.random_frames > 0
        self.random_frames -= self.num_envs * self.steps
        with torch.no_grad():
            for t in range(self.steps):
                obs[:, t] = self.obs
                if random:
                    act = self.env.action_space.sample()
                else:
                    act = self.net(torch.as_tensor(obs[:, t])).argmax(-1).numpy()
                action[:, t] = act
                self.obs, reward[:, t], terminated[:, t], truncated[:, t], info = self.env.step(act)
                next_obs[:, t] = self.obs
                ended = info.get("_final_obs")
                if ended is not None and ended.any():  # same-step auto-reset: obs is the reset one
                    next_obs[ended, t] = np.stack(info["final_obs"][ended])
        n_actions = int(self.env.single_action_space.n)
        flags = {
            "done": terminated | truncated, "terminated": terminated, "truncated": truncated,
        }  # fmt: skip
        batch = TensorDict(
            {
                "observation": torch.from_numpy(obs),
                "action": nn.functional.one_hot(torch.from_numpy(action), n_actions),
                "next": {
                    "observation": torch.from_numpy(next_obs),
                    "reward": torch.from_numpy(reward).unsqueeze(-1),
                    **{k: torch.from_numpy(v).unsqueeze(-1) for k, v in flags.items()},
                },
            },
            batch_size=shape,
        )
        self.buffer.extend(batch)
        return batch.numel()


class MinimalEnvPoolWorker:
    """Steps EnvPool's envs with a plain torch policy and returns numpy batches.

    No torchrl, no TensorDict: the EnvPool floor (EnvPool's own next-step auto-reset).

    Args:
        env_id: an EnvPool id (``"CartPole-v1"``, ``"Pong-v5"``: 4 stacked 84x84 frames).
        num_envs: envs EnvPool steps together.
        frames_per_batch: frames per returned batch (a multiple of ``num_envs``).
        seed: env and policy seed.
    """

    def __init__(self, env_id: str, num_envs: int, frames_per_batch: int, seed: int = 0) -> None:
        import envpool

        torch.set_num_threads(1)
        torch.manual_seed(0)
        self.steps = frames_per_batch // num_envs
        self.env = envpool.make(env_id, env_type="gymnasium", num_envs=num_envs, seed=seed)
        space = self.env.observation_space
        actions = int(self.env.action_space.n)
        if len(space.shape) > 1:  # frames: the same linear pixel policy as tdscheme's row
            self.net: nn.Module = PixelIndexPolicyNet(tuple(space.shape), actions)
        else:
            self.net = nn.Sequential(torch_mlp(int(np.prod(space.shape)), actions), ArgmaxIndex())
        self.obs, _ = self.env.reset()

    def next(self) -> dict[str, np.ndarray]:
        """Collects one batch of ``frames_per_batch`` frames (time-major)."""
        obs = np.empty((self.steps, *self.obs.shape), dtype=self.obs.dtype)
        shape = (self.steps, self.obs.shape[0])
        action = np.empty(shape, dtype=np.int64)
        reward = np.empty(shape, dtype=np.float32)
        done = np.empty(shape, dtype=bool)
        with torch.no_grad():
            for t in range(self.steps):
                obs[t] = self.obs
                action[t] = self.net(torch.as_tensor(obs[t])).numpy()
                self.obs, reward[t], terminated, truncated, _ = self.env.step(action[t])
                done[t] = np.logical_or(terminated, truncated)
        return {"observation": obs, "action": action, "reward": reward, "done": done}

    def close(self) -> None:
        """Closes the envs."""
        self.env.close()


class MinimalRayCollector:
    """The hand-written Ray collector: ``num_workers`` plain actors, first-ready order.

    Iterating yields numpy batches as they become ready (``ray.wait``) and
    resubmits the worker that produced each one, like torchrl's and tdscheme's
    ``sync=False``. ``worker_cls`` is :class:`MinimalCollectorWorker` (gymnasium),
    :class:`MinimalEnvPoolWorker` or :class:`MinimalBufferWriter` (with
    ``worker_kwargs`` naming its buffer, and :meth:`start` to run it in the background).
    """

    def __init__(
        self,
        env_id: str,
        *,
        num_envs: int,
        frames_per_batch: int,
        num_workers: int = 2,
        worker_cls: type = MinimalCollectorWorker,
        worker_kwargs: dict[str, Any] | None = None,
    ) -> None:
        remote_cls = ray.remote(num_cpus=1)(worker_cls)
        self.workers = [
            remote_cls.remote(env_id, num_envs, frames_per_batch, seed=i, **(worker_kwargs or {}))
            for i in range(num_workers)
        ]
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: what stopped :meth:`start`'s thread, if anything did
        self.error: BaseException | None = None

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        pending = {worker.next.remote(): worker for worker in self.workers}
        while True:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=RAY_TIMEOUT_S)
            if not ready:
                raise TimeoutError(f"no batch within {RAY_TIMEOUT_S} s")
            worker = pending.pop(ready[0])
            batch = ray.get(ready[0], timeout=RAY_TIMEOUT_S)
            yield batch
            pending[worker.next.remote()] = worker

    def start(self) -> None:
        """Iterates in a daemon thread, dropping what the workers return, until :meth:`shutdown`.

        For workers that write their batches themselves (:class:`MinimalBufferWriter`);
        an error that stops the thread is kept in ``error``.
        """

        def run() -> None:
            try:
                for _ in self:
                    if self._stop.is_set():
                        return
            except Exception as err:  # noqa: BLE001 - kept for the caller
                self.error = err

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        """Stops :meth:`start`'s thread, then kills the actors (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=RAY_TIMEOUT_S)
            self._thread = None
        for worker in self.workers:
            ray.kill(worker, no_restart=True)
        self.workers = []


class InProcessCollector:
    """The same worker stepped in the driver process: no Ray at all."""

    def __init__(self, env_id: str, *, num_envs: int, frames_per_batch: int) -> None:
        self.worker = MinimalCollectorWorker(env_id, num_envs, frames_per_batch)

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        while True:
            yield self.worker.next()

    def shutdown(self) -> None:
        """Closes the env."""
        self.worker.close()


def torchrl_local_collector(
    create_env_fn: Callable[[], Any], policy: Any, *, frames_per_batch: int
) -> Any:
    """torchrl's single-process ``Collector`` (formerly ``SyncDataCollector``)."""
    from torchrl.collectors import Collector

    return Collector(create_env_fn, policy, frames_per_batch=frames_per_batch, total_frames=-1)


def torchrl_ray_collector(
    create_env_fn: Callable[[], Any],
    policy: Any,
    *,
    frames_per_batch: int,
    sync: bool,
    total_frames: int,
    remote_configs: dict[str, Any],
    num_collectors: int = 2,
    **kwargs: Any,
) -> Any:
    """torchrl's ``RayCollector`` with the arguments tdscheme's takes (a drop-in)."""
    from torchrl.collectors.distributed import RayCollector

    return RayCollector(
        create_env_fn,
        policy,
        frames_per_batch=frames_per_batch,
        total_frames=total_frames,
        num_collectors=num_collectors,
        sync=sync,
        remote_configs=remote_configs,
        **kwargs,
    )


def torchrl_docstring_collector(
    create_env_fn: Callable[[], Any],
    policy: Any,
    *,
    num_collectors: int,
    total_frames: int,
    remote_configs: dict[str, Any],
) -> Any:
    """torchrl's ``RayCollector`` as its docstring example sets it up.

    One env per collector, ``frames_per_batch=200``, ``collector_class=Collector``,
    cpu devices. The example's ``max_frames_per_traj=50`` is left out: it would
    change the env (truncated episodes), not the collector.
    """
    from torchrl.collectors import Collector
    from torchrl.collectors.distributed import RayCollector

    return RayCollector(
        create_env_fn=[create_env_fn] * num_collectors,
        policy=policy,
        collector_class=Collector,
        init_random_frames=-1,
        reset_at_each_iter=False,
        collector_kwargs={"device": "cpu", "storing_device": "cpu"},
        num_collectors=num_collectors,
        total_frames=total_frames,
        frames_per_batch=200,
        remote_configs=remote_configs,
    )


def torchrl_push(collector: Any, policy: Any) -> None:
    """Pushes ``policy``'s weights to every worker of a torchrl ``RayCollector``.

    This blocks until every worker has them: ``RayWeightSyncScheme.send()`` calls
    ``RayTransport.wait_ack()`` for every worker, a ``ray.get`` of the worker's
    ``_receive_weights_scheme`` call, which returns once the worker received the
    tensors (gloo) and applied them to its policy. :func:`torchrl_weights_arrived`
    checks that independently. The first push also sets up the gloo group.
    """
    collector.update_policy_weights_(policy)


def torchrl_weights_arrived(collector: Any, policy: Any) -> bool:
    """Whether every worker's policy now has ``policy``'s weights (read back over Ray)."""
    from tensordict import TensorDict

    local = TensorDict.from_module(policy)
    remote = collector.get_distant_attr("policy")
    return all(bool((TensorDict.from_module(p) == local).all()) for p in remote)
