"""The EnvPool backend of tdscheme.envs: batches with the right keys and shapes."""

from __future__ import annotations

import functools

import pytest
import torch

from tdscheme.collectors import CollectorWorker, WorkerSpec
from tdscheme.envs import make_env
from tdscheme.presets.actor_critic import ActorCriticConfig, actor_critic_modules
from tdscheme.transport import TensorDictCodec

pytest.importorskip(
    "envpool",
    reason="EnvPool is not installed (pip install 'tdscheme[envpool]'; wheels for Python <= 3.11)",
)
pytest.importorskip("treevalue", reason="treevalue (torchrl's EnvPool wrapper needs it) is missing")


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
    for key in ("done", "terminated", "truncated"):
        assert batch["next", key].dtype == torch.bool
    assert batch["next", "reward"].shape[:2] == (num_envs, steps)
    assert batch["collector", "traj_ids"].shape == (num_envs, steps)
    assert (batch["collector", "worker_id"] == 0).all()


def test_the_presets_policy_takes_envpool_index_actions():
    modules = actor_critic_modules("CartPole-v1", hidden_sizes=(8,), backend="envpool")
    env = make_env("CartPole-v1", num_envs=2, backend="envpool")
    try:
        td = env.rollout(3, modules["actor"])
    finally:
        env.close()
    assert td["action"].shape == (2, 3) and set(td["action"].unique().tolist()) <= {0, 1}
    assert td["action_log_prob"].shape == (2, 3)
