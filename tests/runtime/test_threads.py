"""torch's threads in an actor: what Ray gave it, though the worker process imported torch first."""

from __future__ import annotations

import functools

import pytest
import ray
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from tdscheme import RayCollector
from tdscheme.runtime import threads as threads_module
from tdscheme.runtime.threads import match_ray_cpus, warn_driver_threads
from tdscheme.testing import make_env


@pytest.fixture
def torch_threads():
    """Restores this process's torch threads after the test."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("value", ["1", "3"])
def test_match_ray_cpus_sets_what_the_variable_says(monkeypatch, torch_threads, value):
    monkeypatch.setenv("OMP_NUM_THREADS", value)
    assert match_ray_cpus() == int(value)
    assert torch.get_num_threads() == int(value)


@pytest.mark.parametrize("value", [None, "", "0", "-2", "four"])
def test_match_ray_cpus_leaves_torch_alone_without_a_count(monkeypatch, torch_threads, value):
    torch.set_num_threads(2)
    if value is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", value)
    assert match_ray_cpus() is None
    assert torch.get_num_threads() == 2


class ThreadsPolicy(nn.Module):
    """Always action 0 (one-hot of 2), and the process's torch threads beside it."""

    def forward(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        batch = observation.shape[:-1]
        action = torch.zeros(*batch, 2)
        action[..., 0] = 1
        return action, torch.full(batch, torch.get_num_threads())


@pytest.mark.parametrize("num_cpus", [1, 2])
def test_a_collector_actor_runs_torch_on_the_cpus_it_holds(ray_clean, by_value, num_cpus):
    # the session's Ray is tdscheme's local one: its worker processes import torch when
    # spawned, with a thread per core (2 here), before Ray says what an actor holds
    policy = TensorDictModule(ThreadsPolicy(), ["observation"], ["action", "threads"])
    collector = RayCollector(
        functools.partial(make_env, "CartPole-v1", num_envs=2), policy,
        frames_per_batch=8, total_frames=16, num_collectors=1,
        remote_configs={"num_cpus": num_cpus},
    )  # fmt: skip
    try:
        threads = {int(t) for batch in collector for t in batch["threads"].flatten()}
    finally:
        collector.shutdown()
    assert threads == {num_cpus}


def test_a_written_ray_buffer_runs_torch_on_the_cpus_its_actor_holds(ray_clean):
    # torchrl's buffer actor in a preloaded worker process: tdscheme's first write sets it
    from torchrl.data import LazyTensorStorage
    from torchrl.data.replay_buffers.ray_buffer import RayReplayBuffer

    from tdscheme.replay.ray_held import BufferWriter

    buffer = RayReplayBuffer(
        storage=functools.partial(LazyTensorStorage, 100), batch_size=4,
        remote_config={"num_cpus": 1},
    )  # fmt: skip
    try:
        actor = buffer._rb
        threads = lambda: ray.get(actor.__ray_call__.remote(lambda _: torch.get_num_threads()))  # noqa: E731
        BufferWriter(buffer.client()).extend(TensorDict({"x": torch.zeros(8, 3)}, [8]))
        assert threads() == 1
    finally:
        buffer.shutdown()


def test_the_driver_is_told_once_when_its_torch_threads_share_the_cores_with_collectors(
    caplog, monkeypatch
):
    monkeypatch.setattr(warn_driver_threads, "said", False, raising=False)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        with caplog.at_level("WARNING", logger=threads_module.__name__):
            assert warn_driver_threads(2, 2.0)  # 2 threads + 2 collectors on 2 CPUs
            assert warn_driver_threads(2, 2.0)  # said once a process
            assert not warn_driver_threads(2, 16.0)  # a cluster with room
            assert not warn_driver_threads(0, 2.0)  # no collector beside it
            torch.set_num_threads(1)
            assert not warn_driver_threads(2, 2.0)  # one thread: nothing to say
    finally:
        torch.set_num_threads(before)
    [record] = caplog.records
    assert record.getMessage().startswith(
        "torch runs 2 threads in this process (the learner's) beside 2 collector workers on 2 CPUs"
    )
    assert "torch.set_num_threads(1)" in record.getMessage()
