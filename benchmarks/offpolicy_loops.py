"""Plain single-process torchrl off-policy loops (SAC, TD3, DQN): the peers of issue 11.

Each loop is written from torchrl's parts only, as pytorch/rl's ``sota-implementations/sac``
does: a ``Collector`` over one env process (``num_envs`` batched copies), a
``ReplayBuffer(LazyTensorStorage)``, the torchrl loss with its target-network updater
(``SoftUpdate`` / ``HardUpdate``), Adam. Collection and learning alternate in one process:
collect ``frames_per_batch`` frames, extend the buffer, then (past ``init_random_frames``)
``utd_ratio * frames_per_batch`` gradient steps on ``batch_size`` samples. Evaluation runs
``eval_episodes`` deterministic episodes every ``eval_every_frames`` frames and the loop stops
at the first evaluation whose mean return reaches ``target_return``.

:class:`Hyper` holds every hyperparameter; ``benchmarks/offpolicy.py`` fills it from the
tdscheme preset so both run the same values. Also a tuning tool::

    .venv/bin/python benchmarks/offpolicy_loops.py sac --set hidden=64 lr=0.003 --seeds 0,1
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from harness import json_line
from tensordict.nn import NormalParamExtractor, TensorDictModule, TensorDictSequential
from torch import nn
from torchrl.collectors import Collector
from torchrl.data import LazyTensorStorage, ReplayBuffer
from torchrl.modules import (
    MLP,
    AdditiveGaussianModule,
    EGreedyModule,
    ProbabilisticActor,
    QValueActor,
    TanhModule,
    TanhNormal,
    ValueOperator,
)
from torchrl.objectives import DQNLoss, HardUpdate, SACLoss, SoftUpdate, TD3Loss

from tdscheme.engine import evaluate
from tdscheme.envs import make_env
from tdscheme.presets.actor_critic import train_env as preset_train_env


@dataclasses.dataclass
class Hyper:
    """Every hyperparameter of one off-policy run (defaults: SAC on Pendulum)."""

    algo: str = "sac"
    env_id: str = "Pendulum-v1"
    num_envs: int = 1
    hidden: int = 256
    depth: int = 2
    lr: float = 3e-4
    batch_size: int = 256
    utd_ratio: float = 1.0
    frames_per_batch: int = 200
    init_random_frames: int = 1000
    buffer_size: int = 100_000
    gamma: float = 0.99
    tau: float = 0.005  # SoftUpdate's 1 - eps
    target_update_interval: int = 0  # > 0: HardUpdate every this many updates (DQN)
    # TD3
    policy_noise: float = 0.2
    noise_clip: float = 0.5
    exploration_sigma: float = 0.1
    policy_delay: int = 1
    # DQN
    eps_init: float = 1.0
    eps_end: float = 0.05
    eps_frames: int = 10_000
    # the run
    total_frames: int = 50_000
    eval_every_frames: int = 1000
    eval_episodes: int = 5
    target_return: float = -200.0
    num_threads: int = 1
    seed: int = 0


def mlp(in_features: int, out_features: int, h: Hyper) -> MLP:
    """An MLP of ``h.depth`` ReLU layers of ``h.hidden`` units."""
    return MLP(
        in_features=in_features, out_features=out_features, num_cells=[h.hidden] * h.depth,
        activation_class=nn.ReLU,
    )  # fmt: skip


def train_env(h: Hyper) -> Any:
    """The training env: ``num_envs`` copies with episode return and length recorded."""
    return env_factory(h)()


def env_factory(h: Hyper) -> Callable[[], Any]:
    """A picklable factory of the training env (the presets' ``train_env``), for Ray workers."""
    return functools.partial(preset_train_env, h.env_id, num_envs=h.num_envs)


def build(h: Hyper, spec_env: Any) -> tuple[Any, Any, Any, Callable[[int], None]]:
    """``(loss, eval_policy, collector_policy, on_frames)`` for ``h.algo``.

    ``on_frames(frames)`` anneals the exploration after each batch.
    """
    obs_dim = spec_env.observation_spec["observation"].shape[-1]
    action_spec = spec_env.action_spec_unbatched
    if h.algo == "dqn":
        n = action_spec.shape[-1]
        actor = QValueActor(mlp(obs_dim, n, h), in_keys=["observation"], spec=action_spec)
        loss = DQNLoss(actor, delay_value=True, loss_function="l2", action_space=action_spec)
        greedy = EGreedyModule(action_spec, h.eps_init, h.eps_end, h.eps_frames)
        explore = TensorDictSequential(actor, greedy)
        return loss, actor, explore, greedy.step
    act_dim = action_spec.shape[-1]
    q = ValueOperator(mlp(obs_dim + act_dim, 1, h), in_keys=["observation", "action"])
    if h.algo == "sac":
        net = nn.Sequential(mlp(obs_dim, 2 * act_dim, h), NormalParamExtractor())
        actor = ProbabilisticActor(
            TensorDictModule(net, in_keys=["observation"], out_keys=["loc", "scale"]),
            in_keys=["loc", "scale"], spec=action_spec, distribution_class=TanhNormal,
            distribution_kwargs={"low": action_spec.space.low, "high": action_spec.space.high},
        )  # fmt: skip
        loss = SACLoss(actor, q, num_qvalue_nets=2, loss_function="l2", action_spec=action_spec)
        return loss, actor, actor, lambda frames: None
    if h.algo == "td3":
        high = action_spec.space.high
        actor = TensorDictSequential(
            TensorDictModule(mlp(obs_dim, act_dim, h), in_keys=["observation"], out_keys=["param"]),
            TanhModule(in_keys=["param"], out_keys=["action"], spec=action_spec),
        )
        loss = TD3Loss(
            actor, q, action_spec=action_spec, num_qvalue_nets=2, loss_function="l2",
            policy_noise=h.policy_noise, noise_clip=h.noise_clip,
        )  # fmt: skip
        noise = AdditiveGaussianModule(
            action_spec, sigma_init=h.exploration_sigma, sigma_end=h.exploration_sigma,
            std=float(high.max()),
        )  # fmt: skip
        return loss, actor, TensorDictSequential(actor, noise), lambda frames: None
    raise ValueError(f"algo={h.algo!r} is invalid; accepted: 'sac', 'td3', 'dqn'")


def target_updater(loss: Any, h: Hyper) -> Any:
    """``HardUpdate`` every ``target_update_interval`` updates, else ``SoftUpdate(tau)``."""
    if h.target_update_interval > 0:
        return HardUpdate(loss, value_network_update_interval=h.target_update_interval)
    return SoftUpdate(loss, tau=h.tau)


EXPLORERS = (EGreedyModule, AdditiveGaussianModule)


def frames_written(buffer: Any, num_envs: int) -> int:
    """Frames written into a Ray-held buffer (one env: rows of a frame; a batched env:
    a 2-dim storage whose ``write_count`` counts time steps of ``num_envs`` frames)."""
    return buffer.write_count * num_envs


class Learning:
    """The learner side both loops share: loss, optimizer, target updates, evaluations.

    Build it with :meth:`from_hyper` (this module's networks) or :meth:`from_preset` (the
    tdscheme preset's torchrl networks, loss and target updater: the same hyperparameters).
    """

    LOSS_KEYS = ("loss_actor", "loss_qvalue", "loss_alpha", "loss")

    def __init__(
        self, h: Hyper, *, loss: Any, updater: Any, policy: nn.Module, eval_env: Any,
        max_grad_norm: float | None = None,
    ) -> None:  # fmt: skip
        self.h, self.loss, self.updater, self.eval_env = h, loss, updater, eval_env
        self.eval_policy = policy
        # the Ray-held buffer's first write shapes its storage: random-action frames
        # (init_random_frames) and the policy's must carry the same keys, "action" only
        self.ray_policy = TensorDictSequential(policy, selected_out_keys=["action"])
        self.policy = policy
        self.explorers = [m for m in policy.modules() if isinstance(m, EXPLORERS)]
        self.max_grad_norm = max_grad_norm
        self.optim = torch.optim.Adam(self.loss.parameters(), lr=h.lr)
        self.updates, self.credit, self.update_s, self.eval_s = 0, 0.0, 0.0, 0.0
        self.last_eval, self.result, self.reached_at = 0, None, None

    @classmethod
    def from_hyper(cls, h: Hyper, spec_env: Any) -> Learning:
        """This module's networks and loss (the tuning tool)."""
        loss, _, policy, _ = build(h, spec_env)
        loss.make_value_estimator(gamma=h.gamma)
        eval_env = make_env(h.env_id, num_envs=h.eval_episodes)
        return cls(h, loss=loss, updater=target_updater(loss, h), policy=policy, eval_env=eval_env)

    @classmethod
    def from_preset(cls, preset: Any, h: Hyper) -> Learning:
        """The preset's torchrl modules, loss (value estimator set) and target updater."""
        modules = preset.policy_factory()()
        built = preset.learner_factory()(**modules)
        return cls(
            h, loss=built.loss_module, updater=built.target_updater, policy=modules["actor"],
            eval_env=preset.eval_env_factory()(), max_grad_norm=preset.algo.max_grad_norm,
        )  # fmt: skip

    def on_frames(self, frames: int) -> None:
        """Anneals the exploration modules (torchrl's ``step(frames)``)."""
        for module in self.explorers:
            module.step(frames)

    def updates_due(self, frames_before: int, frames: int) -> int:
        """Gradient steps owed for frames ``frames_before..frames`` (past the random ones)."""
        learning = max(0, frames - max(frames_before, self.h.init_random_frames))
        self.credit += learning * self.h.utd_ratio
        due = int(self.credit + 1e-9)
        self.credit -= due
        return due

    def train(self, sample: Callable[[], Any], num_updates: int) -> None:
        """``num_updates`` gradient steps on ``sample()``'s minibatches."""
        t0 = time.perf_counter()
        for _ in range(num_updates):
            out = self.loss(sample())
            keys = [k for k in self.LOSS_KEYS if k in out.keys()]
            if self.h.algo == "td3" and self.updates % self.h.policy_delay:
                keys = [k for k in keys if k != "loss_actor"]
            total = sum(out[k] for k in keys)
            self.optim.zero_grad(set_to_none=True)
            total.backward()
            if self.max_grad_norm is not None:
                nn.utils.clip_grad_norm_(self.loss.parameters(), self.max_grad_norm)
            self.optim.step()
            self.updater.step()
            self.updates += 1
        self.update_s += time.perf_counter() - t0

    def evaluate_due(self, frames: int) -> bool:
        """Evaluates when due; True once the mean return reaches the target."""
        h = self.h
        if frames - self.last_eval < h.eval_every_frames or frames < h.init_random_frames:
            return False
        self.last_eval = frames
        t0 = time.perf_counter()
        self.result = evaluate(self.eval_env, self.eval_policy, episodes=h.eval_episodes)
        self.eval_s += time.perf_counter() - t0
        if self.result.mean_return >= h.target_return:
            self.reached_at = time.perf_counter()
            return True
        return False

    def summary(self, frames: int, start: float) -> dict[str, Any]:
        """The run's JSON row."""
        ret = None if self.result is None else self.result.mean_return
        return {
            "frames": frames, "updates": self.updates,
            "wall_s": (self.reached_at or time.perf_counter()) - start,
            "reached": bool(ret is not None and ret >= self.h.target_return),
            "eval_return": ret, "update_s": self.update_s, "eval_s": self.eval_s,
            "done_unix": time.time(),
        }  # fmt: skip


def run_plain(h: Hyper, preset: Any = None) -> dict[str, Any]:
    """The plain single-process loop to ``h.target_return``: frames, wall time, timings.

    With ``preset``, its env, networks, loss and target updater (else this module's).
    """
    start = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(h.num_threads)
    torch.manual_seed(h.seed)
    if preset is None:
        env = train_env(h)
        learning = Learning.from_hyper(h, env)
    else:
        env = preset.env_factory()()
        learning = Learning.from_preset(preset, h)
    buffer = ReplayBuffer(storage=LazyTensorStorage(h.buffer_size), batch_size=h.batch_size)
    collector = Collector(
        env, learning.policy, frames_per_batch=h.frames_per_batch, total_frames=h.total_frames,
        init_random_frames=h.init_random_frames,
    )  # fmt: skip
    collector.set_seed(h.seed)
    frames = 0
    try:
        for batch in collector:
            buffer.extend(batch.reshape(-1))
            frames, before = frames + batch.numel(), frames
            learning.on_frames(batch.numel())
            due = learning.updates_due(before, frames)
            if due:
                learning.train(buffer.sample, due)
                collector.update_policy_weights_()
            if learning.evaluate_due(frames):
                break
    finally:
        collector.shutdown()
        learning.eval_env.close()
        torch.set_num_threads(threads)
    return learning.summary(frames, start)


def run_torchrl_ray(
    h: Hyper, preset: Any = None, *, num_collectors: int = 1, weight_push_interval: int = 1,
    timeout_s: float = 900.0,
) -> dict[str, Any]:  # fmt: skip
    """torchrl's own Ray path: ``RayCollector(replay_buffer=RayReplayBuffer(...))`` + ``start()``.

    The collectors write into the Ray-held buffer in the background; this process
    samples it and trains: whenever frames were written, ``utd_ratio`` gradient steps
    per new frame (past ``init_random_frames``), then a weight push once
    ``weight_push_interval`` updates are done (torchrl's ``update_policy_weights_``).
    Ray must already be running (both distributed peers join the same one).
    """
    import asyncio

    from torchrl.collectors.distributed import RayCollector
    from torchrl.data.replay_buffers.ray_buffer import RayReplayBuffer

    start = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(h.num_threads)
    torch.manual_seed(h.seed)
    if preset is None:
        probe = train_env(h)
        learning = Learning.from_hyper(h, probe)
        probe.close()
        make_train_env = env_factory(h)
    else:
        learning = Learning.from_preset(preset, h)
        make_train_env = preset.env_factory()
    # a batched env writes [num_envs, time] rows: a 2-dim storage samples frames
    ndim = 2 if h.num_envs > 1 else 1
    buffer = RayReplayBuffer(
        storage=functools.partial(LazyTensorStorage, h.buffer_size, ndim=ndim),
        batch_size=h.batch_size, remote_config={"num_cpus": 0},
    )  # fmt: skip
    collector = RayCollector(
        make_train_env, learning.ray_policy, frames_per_batch=h.frames_per_batch,
        total_frames=h.total_frames, num_collectors=num_collectors,
        init_random_frames=h.init_random_frames, replay_buffer=buffer,
        remote_configs={"num_cpus": 1},
    )  # fmt: skip
    frames, since_push, written = 0, 0, 0
    deadline = time.monotonic() + timeout_s
    try:
        collector.set_seed(h.seed)
        collector.start()
        while frames < h.total_frames and time.monotonic() < deadline:
            written = frames_written(buffer, h.num_envs)
            if written <= frames:
                time.sleep(0.005)
                continue
            # the collectors run ahead unthrottled: train on the frames in order, at most
            # one evaluation period at a time, so evaluations come on the same schedule
            frames, before = min(written, frames + h.eval_every_frames), frames
            learning.on_frames(frames - before)
            due = learning.updates_due(before, frames)
            learning.train(buffer.sample, due)
            since_push += due
            if due and since_push >= weight_push_interval:
                collector.update_policy_weights_(learning.ray_policy)
                since_push = 0
            if learning.evaluate_due(frames):
                break
        written = frames_written(buffer, h.num_envs)
    finally:
        asyncio.run(collector.async_shutdown())
        buffer.shutdown()
        learning.eval_env.close()
        torch.set_num_threads(threads)
    return {**learning.summary(frames, start), "frames_written": written}


DEFAULTS = {
    "sac": {},
    "td3": {"algo": "td3"},
    "dqn": {"algo": "dqn", "env_id": "CartPole-v1", "target_return": 475.0, "tau": 1.0},
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("algo", choices=sorted(DEFAULTS))
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--run", choices=("plain", "torchrl-ray"), default="plain")
    args = parser.parse_args(argv)
    if args.run == "torchrl-ray":
        import ray

        ray.init(num_cpus=2, include_dashboard=False)
    values = dict(DEFAULTS[args.algo])
    for pair in args.set:
        key, _, value = pair.partition("=")
        values[key] = json.loads(value)
    for seed in [int(s) for s in args.seeds.split(",")]:
        h = Hyper(**{**values, "seed": seed})
        row = run_plain(h) if args.run == "plain" else run_torchrl_ray(h)
        json_line({"run": args.run, "set": args.set, "algo": args.algo, "seed": seed, **row})
    return 0


if __name__ == "__main__":
    sys.exit(main())
