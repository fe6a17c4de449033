"""A Ray worker ships the lean rollout's own batch buffer (no torchrl copy); batches stay whole."""

from __future__ import annotations

import functools

import pytest
import torch

from tdscheme import RayCollector
from tdscheme.collectors import CollectorWorker, WorkerSpec
from tdscheme.envs import make_env
from tdscheme.rollout.torchrl_names import Collector
from tdscheme.testing import mlp_policy
from tdscheme.transport import TensorDictCodec

cartpole = functools.partial(make_env, "CartPole-v1", num_envs=4)


def reused(**spec_kwargs) -> bool:  # a WorkerSpec's replay_buffer needs Ray: see below
    torch.manual_seed(0)
    spec = WorkerSpec(cartpole, mlp_policy(4, 2), frames_per_batch=64, **spec_kwargs)
    worker = CollectorWorker(0, spec, reuse_batch_buffer=True)
    try:
        return worker._collector.return_same_td
    finally:
        worker.shutdown()


def test_only_the_lean_rollouts_plain_batches_reuse_their_buffer():
    assert reused()
    assert not reused(collector_class=Collector)  # torchrl's rollout: its copy stays
    assert not reused(collector_kwargs={"trajs_per_batch": 4})
    assert not reused(preemptible=True)


@pytest.mark.parametrize("reuse", [False, True])
def test_in_process_batches_are_their_own_unless_the_buffer_is_reused(reuse):
    """Without the flag (in-process use) each payload keeps its frames after the next collect;
    with it, the payload views the rollout's buffer (no copy): the next collect overwrites it.

    (With it, the first batch's encoding lays the buffer out in one storage, so from the
    second batch on the payload is that one storage.)
    """
    torch.manual_seed(0)
    spec = WorkerSpec(cartpole, mlp_policy(4, 2), frames_per_batch=64)
    worker = CollectorWorker(0, spec, reuse_batch_buffer=reuse)
    try:
        worker.collect(0)
        first = worker.collect(1).payload
        assert bool(first.header.get("arena")) is reuse
        kept = TensorDictCodec().decode(first).clone()
        worker.collect(2)
        same = torch.equal(TensorDictCodec().decode(first)["observation"], kept["observation"])
        assert same is not reuse
    finally:
        worker.shutdown()


@pytest.mark.parametrize("sync", [True, False])
def test_batches_a_driver_holds_are_whole_and_continue_each_other(ray_clean, sync):
    """Each batch a driver keeps is its own (Ray copied it before the worker's next rollout)."""
    torch.manual_seed(0)
    with RayCollector(
        cartpole, mlp_policy(4, 2), frames_per_batch=64, total_frames=64 * 6, num_collectors=1,
        sync=sync, remote_configs={"num_cpus": 0.5},
    ) as collector:  # fmt: skip
        assert collector.stats()["fast_path"] == [True]
        # sync=True stacks the workers' batches: [workers, envs, time]
        held = [batch.reshape(-1, batch.batch_size[-1]) for batch in collector]
    assert len(held) == 6
    for before, after in zip(held, held[1:], strict=False):
        assert not torch.equal(before["observation"], after["observation"])
        # each env row goes on where the previous batch left it (or from a reset)
        ended = before["next", "done"][:, -1].squeeze(-1)
        last, first = before["next", "observation"][:, -1], after["observation"][:, 0]
        assert torch.equal(last[~ended], first[~ended])
        inside = ~before["next", "done"][:, :-1].squeeze(-1)
        nxt, obs = before["next", "observation"][:, :-1], before["observation"][:, 1:]
        assert torch.equal(nxt[inside], obs[inside])


def test_frames_written_into_a_ray_held_buffer_are_whole_and_continue_each_other(
    ray_replay_buffer,
):
    """The worker writes from its own batch buffer: each write is over before the next rollout."""
    torch.manual_seed(0)
    with RayCollector(
        cartpole, mlp_policy(4, 2), frames_per_batch=64, total_frames=64 * 6, num_collectors=1,
        replay_buffer=ray_replay_buffer, remote_configs={"num_cpus": 0.5},
    ) as collector:  # fmt: skip
        for _ in collector:
            pass
    rows = ray_replay_buffer[:]  # rows of 16 steps, 4 per batch (one per env), in write order
    assert rows.shape == torch.Size([24, 16])
    for row, after in zip(rows[:-4], rows[4:], strict=True):  # the same env, the next batch
        assert not torch.equal(row["observation"], after["observation"])
        if not row["next", "done"][-1]:
            assert torch.equal(row["next", "observation"][-1], after["observation"][0])
