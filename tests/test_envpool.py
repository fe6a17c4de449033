"""The EnvPool backend of tdscheme.envs: batches with the right keys and shapes."""

from __future__ import annotations

import functools
import sys

import pytest
import torch
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.envs.utils import ExplorationType

from tdscheme.collectors import CollectorWorker, WorkerSpec
from tdscheme.envs import make_env, make_envpool_env
from tdscheme.presets.actor_critic import ActorCriticConfig, actor_critic_modules
from tdscheme.rollout.lean import LeanCollector
from tdscheme.rollout.torchrl_names import Collector
from tdscheme.transport import TensorDictCodec
from tests.rollout.test_lean import assert_same_frames

pytest.importorskip(
    "envpool",
    reason="EnvPool is not installed (pip install 'tdscheme[envpool]'; wheels for Python >= 3.11)",
)


def test_an_unknown_backend_is_named():
    with pytest.raises(ValueError, match="backend='dm' is invalid; accepted: gymnasium, envpool"):
        make_env("CartPole-v1", backend="dm")
    with pytest.raises(ValueError, match="env_backend='dm' is invalid"):
        ActorCriticConfig(env_backend="dm")


@pytest.mark.parametrize(
    ("env_id", "obs_shape", "obs_dtype"),
    [("CartPole-v1", (4,), torch.float32), ("ALE/Pong-v5", (4, 84, 84), torch.uint8)],
)
def test_worker_batches_have_the_keys_and_shapes(env_id, obs_shape, obs_dtype):
    num_envs, steps = 3, 4
    env_fn = functools.partial(make_env, env_id, num_envs=num_envs, backend="envpool")
    worker = CollectorWorker(0, WorkerSpec(env_fn, None, frames_per_batch=num_envs * steps))
    try:
        batch = TensorDictCodec().decode(worker.collect(0).payload)
    finally:
        worker.shutdown()
    assert batch.batch_size == (num_envs, steps)
    assert batch["observation"].shape == (num_envs, steps, *obs_shape)
    assert batch["next", "observation"].shape == (num_envs, steps, *obs_shape)
    assert batch["observation"].dtype == obs_dtype
    assert batch["action"].shape == (num_envs, steps) and batch["action"].dtype == torch.int64
    for key in ("done", "terminated", "truncated"):  # the gymnasium backend's shapes
        assert batch["next", key].dtype == torch.bool
        assert batch["next", key].shape == (num_envs, steps, 1)
    assert batch["next", "reward"].shape == (num_envs, steps, 1)
    assert batch["collector", "traj_ids"].shape == (num_envs, steps)
    assert (batch["collector", "worker_id"] == 0).all()


def test_observations_are_each_envs_own():
    """EnvPool 0.8.4 under NumPy 2 returned arrays of strides (0, 0): one value everywhere (1.2
    does not; tests/envs/test_atari.py checks Pong's frames)."""
    env = make_env("CartPole-v1", num_envs=3, backend="envpool")
    try:
        obs = env.reset()["observation"]
    finally:
        env.close()
    assert obs.shape == (3, 4) and obs.unique().numel() == obs.numel(), obs


def test_a_partial_reset_resets_only_those_envs():
    env = make_env("CartPole-v1", num_envs=3, backend="envpool")
    try:
        td = env.reset()
        before = td["observation"].clone()
        after = env.reset(td.set("_reset", torch.tensor([[True], [False], [True]])))
    finally:
        env.close()
    assert torch.equal(after["observation"][1], before[1])
    assert not torch.equal(after["observation"][0], before[0])


def test_several_observations_are_entries_without_treevalue():
    """EnvPool 1.x gives a dict of observations (0.8.4 a treevalue tree): one entry each."""
    env = make_envpool_env("CheetahRun-v1", num_envs=2)
    try:
        td = env.rollout(3)
    finally:
        env.close()
    assert td["next", "position"].shape == (2, 3, 8) and td["next", "velocity"].shape == (2, 3, 9)
    assert td["next", "reward"].shape == (2, 3, 1)
    assert "treevalue" not in sys.modules and "gym" not in sys.modules


def test_a_seeded_worker_collects_the_same_frames_twice():
    """A seed (the presets set one) reseeds EnvPool and resets torchrl's carrier: reproducible."""
    env_fn = functools.partial(make_env, "CartPole-v1", num_envs=3, backend="envpool")
    torch.manual_seed(0)
    actor = actor_critic_modules("CartPole-v1", hidden_sizes=(8,), backend="envpool")["actor"]
    runs = []
    for _ in range(2):
        worker = CollectorWorker(0, WorkerSpec(env_fn, actor, frames_per_batch=150), seed=3)
        try:
            runs.append(TensorDictCodec().decode(worker.collect(0).payload))
        finally:
            worker.shutdown()
    assert_same_frames(runs[:1], runs[1:])
    assert runs[0]["next", "done"].any()


def test_the_presets_policy_takes_envpool_index_actions():
    modules = actor_critic_modules("CartPole-v1", hidden_sizes=(8,), backend="envpool")
    env = make_env("CartPole-v1", num_envs=2, backend="envpool")
    try:
        td = env.rollout(3, modules["actor"])
    finally:
        env.close()
    assert td["action"].shape == (2, 3) and set(td["action"].unique().tolist()) <= {0, 1}
    assert td["action_log_prob"].shape == (2, 3)


class PixelArgmax(nn.Module):
    """The index of the largest of 6 linear scores of a 4x84x84 uint8 frame stack."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4 * 84 * 84, 6)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.linear(obs.flatten(-3).float() / 255).argmax(-1)


def seeded_batches(cls, env_fn, policy, *, steps, seed=0, **kwargs):
    """Two batches of ``cls`` seeded with ``seed`` (torchrl's ``reset()`` fails on EnvPool's
    carrier: "more than one element of the written-to tensor refers to a single memory
    location", so unlike ``test_lean.batches`` there is none)."""
    torch.manual_seed(seed)
    env = env_fn()
    collector = cls(
        env, policy, frames_per_batch=steps * env.batch_size.numel(),
        auto_register_policy_transforms=False, **kwargs,
    )  # fmt: skip
    try:
        collector.set_seed(seed)
        it = iter(collector)
        return [next(it), next(it)], getattr(collector, "lean_reason", None)
    finally:
        collector.shutdown()


@pytest.mark.parametrize(
    ("env_id", "num_envs", "steps"), [("CartPole-v1", 4, 60), ("ALE/Pong-v5", 2, 8)]
)
@pytest.mark.parametrize(
    "exploration_type", [ExplorationType.DETERMINISTIC, ExplorationType.RANDOM]
)
def test_lean_envpool_frames_equal_torchrls(env_id, num_envs, steps, exploration_type):
    """The lean loop steps EnvPool itself (no reset calls: EnvPool resets at the next step)."""
    env_fn = functools.partial(make_env, env_id, num_envs=num_envs, backend="envpool")
    torch.manual_seed(0)
    if env_id == "CartPole-v1":  # the presets' ProbabilisticActor (a sample when RANDOM)
        actor = actor_critic_modules(env_id, hidden_sizes=(8,), backend="envpool")["actor"]
    else:  # frames: a linear layer over the 4x84x84 uint8 frames, greedy
        actor = TensorDictModule(PixelArgmax(), in_keys=["observation"], out_keys=["action"])
    kwargs = {"exploration_type": exploration_type}
    want, _ = seeded_batches(Collector, env_fn, actor, steps=steps, **kwargs)
    got, reason = seeded_batches(LeanCollector, env_fn, actor, steps=steps, **kwargs)
    assert reason is None
    assert_same_frames(want, got)
    if env_id == "CartPole-v1":  # episodes ended, and EnvPool began new ones, inside the batches
        done = torch.cat([b["next", "done"].flatten() for b in got])
        assert done.any() and got[-1]["collector", "traj_ids"].unique().numel() > num_envs
