"""A Ray-held replay buffer that hangs or dies: bounded calls, one clear error, no restarts.

Real Ray actors (torchrl's RayReplayBuffer), real CartPole workers writing into it.
"""

from __future__ import annotations

import functools
import os
import re
import signal
import time

import pytest
import ray
import torch
from tensordict import TensorDict

from tdscheme import RayCollector
from tdscheme.errors import ReplayBufferDied, WorkerError
from tdscheme.replay.bounded import BoundedRayBuffer
from tdscheme.testing import kill_and_wait, make_env, mlp_policy

SMALL = {"remote_configs": {"num_cpus": 0.5}}


@pytest.fixture
def buffer(ray_replay_buffer):
    return ray_replay_buffer


def _frames(n: int) -> TensorDict:
    return TensorDict({"observation": torch.arange(n, dtype=torch.float32)}, [n])


def test_bounded_calls_are_the_buffers_own_and_a_hung_buffer_times_out(buffer):
    bounded = BoundedRayBuffer(buffer, timeout_s=60.0)  # the actor's process may be starting
    bounded.extend(_frames(20))
    assert len(bounded) == 20 == bounded.write_count
    assert bounded.sample().batch_size == torch.Size([8])
    assert torch.equal(bounded[:5]["observation"], torch.arange(5, dtype=torch.float32))
    bounded.timeout_s = 1.0
    pid = ray.get(buffer._rb.__ray_call__.remote(lambda _: os.getpid()), timeout=30)
    os.kill(pid, signal.SIGSTOP)  # a hung buffer: its process does nothing (torchrl waits forever)
    try:
        start = time.monotonic()
        with pytest.raises(TimeoutError, match=r"did not answer sample\(\) within 1 s"):
            bounded.sample()
        assert time.monotonic() - start < 10.0
    finally:
        os.kill(pid, signal.SIGCONT)
    assert len(bounded) == 20  # answers again once the process runs


def test_a_dead_buffer_is_named_not_an_actor_died_error(buffer):
    bounded = BoundedRayBuffer(buffer, timeout_s=60.0)
    bounded.extend(_frames(20))
    kill_and_wait(buffer._rb)
    with pytest.raises(ReplayBufferDied, match=r"replay buffer's actor died \(during the learner"):
        bounded.sample()


def test_prefetched_samples_are_drawn_ahead_and_a_death_still_named(buffer):
    """prefetch=1: each sample asks for the next, drawn from the buffer as it was then."""
    bounded = BoundedRayBuffer(buffer, timeout_s=60.0, prefetch=1)
    bounded.extend(_frames(20))  # frames 0..19
    first = bounded.sample()
    bounded.extend(_frames(1000)[100:])  # frames 100..999 after the next sample was asked for
    ahead = bounded.sample()  # drawn before the write: only the first 20 frames
    assert (first["observation"] < 20).all() and (ahead["observation"] < 20).all()
    later = [bounded.sample()["observation"] for _ in range(3)]
    assert (torch.cat(later) >= 100).any()  # then from the whole buffer
    assert bounded.sample(batch_size=3).batch_size == torch.Size([3])  # another size: not ahead
    with pytest.raises(ValueError, match="prefetch=2 is invalid; accepted: 0 or 1"):
        BoundedRayBuffer(buffer, timeout_s=1.0, prefetch=2)
    kill_and_wait(buffer._rb)
    # the sample asked for ahead was drawn before the death (the actor served it before the
    # size-3 sample): its frames are real; the next call finds the actor dead, named
    assert (bounded.sample()["observation"] < 1000).all()
    with pytest.raises(ReplayBufferDied, match=r"replay buffer's actor died \(during the learner"):
        bounded.sample()


def test_workers_writing_into_a_dead_buffer_stop_with_one_error_and_no_restarts(buffer):
    """Before: each worker's write raised ActorDiedError and was rebuilt max_restarts times."""
    cartpole = functools.partial(make_env, "CartPole-v1")
    with RayCollector(
        cartpole, mlp_policy(4, 2), frames_per_batch=100, total_frames=-1, num_collectors=2,
        replay_buffer=buffer, max_restarts=3, **SMALL,
    ) as collector:  # fmt: skip
        collector.start()
        deadline = time.monotonic() + 60
        while buffer.write_count < 200:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        ray.kill(buffer._rb, no_restart=True)
        deadline = time.monotonic() + 60
        while collector.is_running:
            assert time.monotonic() < deadline, "background collection did not stop"
            time.sleep(0.1)
        with pytest.raises(WorkerError) as info:
            collector.stats(timeout=10)
        stats = collector.stats(timeout=10)
    assert info.value.remote_type == "ReplayBufferDied", info.value
    # a worker that had not written yet meets the death at its first look at the storage
    assert re.search(
        r"the replay buffer's actor died \(during a worker's (write|look at the storage)\)",
        str(info.value),
    ), info.value
    assert stats["restarts"] == 0, stats


@pytest.mark.timeout(180)
def test_an_off_policy_run_whose_buffer_actor_died_stops_naming_it(ray_clean):
    """Scheme with buffer_location="ray": the buffer actor killed, the next step names it."""
    from tests.scheme.test_offpolicy import ray_buffer, scheme

    with scheme(
        ray_buffer, num_collectors=1, frames_per_batch=64, init_random_frames=64,
        utd_ratio=0.25, buffer_location="ray", collector_resources={"num_cpus": 0.5},
    ) as s:  # fmt: skip
        s.step()
        ray.kill(s.replay_buffer.buffer._rb, no_restart=True)
        start = time.monotonic()
        with pytest.raises((ReplayBufferDied, WorkerError), match="replay buffer's actor died"):
            for _ in range(20):
                s.step()
        assert time.monotonic() - start < 60


@pytest.fixture
def distributed_buffer(ray_clean):
    """torchrl's Ray-held buffer on its "distributed" transport (its own tensor transport)."""
    from torchrl.data import LazyTensorStorage
    from torchrl.data.replay_buffers.ray_buffer import RayReplayBuffer

    rb = RayReplayBuffer(
        storage=functools.partial(LazyTensorStorage, 10_000), batch_size=8,
        remote_config={"num_cpus": 0}, transport="distributed",
    )  # fmt: skip
    yield rb
    rb.shutdown()


def test_the_distributed_transport_is_bounded_too(distributed_buffer, tmp_path):
    """Samples through torchrl's distributed client (its own timeout, the first call bounded
    in a helper thread), the rest through the buffer's actor; a hung buffer times out."""
    bounded = BoundedRayBuffer(distributed_buffer, timeout_s=60.0)
    bounded.extend(_frames(20))
    bounded.extend(_frames(20))  # the second through the bound schema
    assert len(bounded) == 40 == bounded.write_count
    assert bounded.sample().batch_size == torch.Size([8])
    assert torch.equal(bounded[:5]["observation"], torch.arange(5, dtype=torch.float32))
    bounded.dumps(str(tmp_path / "rb"))
    bounded.loads(str(tmp_path / "rb"))
    assert len(bounded) == 40
    bounded.timeout_s = 1.0
    pid = ray.get(distributed_buffer._rb.__ray_call__.remote(lambda _: os.getpid()), timeout=30)
    os.kill(pid, signal.SIGSTOP)
    try:
        for call in (bounded.sample, bounded.__len__, lambda: bounded.extend(_frames(20))):
            start = time.monotonic()
            with pytest.raises(TimeoutError, match=r"did not answer \w+\(\) within 1 s"):
                call()
            assert time.monotonic() - start < 15.0
    finally:
        os.kill(pid, signal.SIGCONT)


def test_tdscheme_calls_a_ray_held_buffer_only_through_its_bounded_methods(
    ray_clean, tmp_path, monkeypatch
):
    """Every attribute tdscheme asks of the wrapper in a real run (steps, a checkpoint of the
    buffer, its reload, the state, the shutdown) is one of its bounded methods: nothing
    reaches torchrl's buffer through ``__getattr__`` (the user's own calls' way in)."""
    from tests.scheme.test_offpolicy import ray_buffer, scheme

    forwarded = []
    original = BoundedRayBuffer.__getattr__

    def recording(self, name):
        forwarded.append(name)
        return original(self, name)

    monkeypatch.setattr(BoundedRayBuffer, "__getattr__", recording)
    with scheme(
        ray_buffer, num_collectors=1, frames_per_batch=64, init_random_frames=64,
        utd_ratio=0.25, buffer_location="ray", collector_resources={"num_cpus": 0.5},
        checkpoint_replay_buffer=True,
    ) as s:  # fmt: skip
        for _ in range(3):
            s.step()
        s.dump_replay_buffer(str(tmp_path / "rb"))
        s.load_replay_buffer(str(tmp_path / "rb"))
        s.state_dict()
        assert isinstance(s.replay_buffer, BoundedRayBuffer)
    assert forwarded == []
