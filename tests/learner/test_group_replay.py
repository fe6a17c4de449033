"""Replay learners in groups: two gloo ranks, each sampling its share of the Ray-held buffer, take
the steps one OffPolicyLearner takes on the whole minibatch."""

from __future__ import annotations

import functools
import os
import signal

import pytest
import ray
import torch
from tensordict import TensorDict
from torchrl.data import LazyTensorStorage, SamplerWithoutReplacement, TensorDictReplayBuffer
from torchrl.data.replay_buffers.ray_buffer import RayReplayBuffer

from tdscheme.learner.group import LearnerGroup
from tdscheme.presets import get_preset
from tdscheme.presets.offpolicy import sac_learner
from tdscheme.replay.bounded import BoundedRayBuffer
from tdscheme.replay.ray_held import ray_buffer_kwargs
from tdscheme.testing import assert_same
from tdscheme.testing.sac import keyed_noise_sac_modules, pendulum_transitions, with_noise

ATOL = 1e-6
FRAMES = 640
BATCH = 64


def sac_factories():
    config = get_preset("sac-pendulum").algo
    policy_factory = functools.partial(keyed_noise_sac_modules, hidden_sizes=(32, 32))
    return policy_factory, functools.partial(sac_learner, config=config)


def pendulum_frames() -> TensorDict:
    """Real Pendulum transitions (random actions), each with its own noise draws."""
    frames = pendulum_transitions(FRAMES, num_envs=2)
    return with_noise(frames, torch.Generator().manual_seed(0))


#: frames in storage order: one Learner's minibatch k is the two ranks' samples of step k
#: (a partial of torchrl's class: the buffer's actor cannot import this test module)
in_order = functools.partial(SamplerWithoutReplacement, shuffle=False)


def fresh_learner(policy_factory, learner_factory):
    torch.manual_seed(0)
    return learner_factory(**policy_factory())


def max_difference(a: TensorDict, b: TensorDict) -> float:
    return max(float((a.get(k) - b.get(k)).abs().max()) for k in a.keys(True, True))


def test_two_sac_ranks_equal_one_learner_on_the_whole_minibatch(ray_clean):
    policy_factory, learner_factory = sac_factories()
    frames = pendulum_frames()
    local = TensorDictReplayBuffer(
        storage=LazyTensorStorage(FRAMES), sampler=in_order(), batch_size=BATCH
    )
    local.extend(frames)
    held = RayReplayBuffer(
        storage=functools.partial(LazyTensorStorage, FRAMES), sampler=in_order,
        batch_size=BATCH, **ray_buffer_kwargs(),
    )  # fmt: skip
    buffer = BoundedRayBuffer(held, timeout_s=60.0)
    reference = fresh_learner(policy_factory, learner_factory)
    group = None
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each rank: the same kernels, only the split sums differ
    try:
        buffer.extend(frames)
        group = LearnerGroup(
            fresh_learner(policy_factory, learner_factory), num_learners=2,
            policy_factory=policy_factory, learner_factory=learner_factory,
            resources={"num_cpus": 0.5},
        )  # fmt: skip
        expected = reference.replay_updates(local, 50)
        got = []
        for _ in range(5):  # 10 steps per round trip, as a training loop asks for them
            got += group.replay_updates(buffer, 10)
        assert len(got) == len(expected) == 50
        for step, (g, e) in enumerate(zip(got, expected, strict=True)):
            assert float(g["num_frames"]) == float(e["num_frames"]) == BATCH
            for key in ("loss", "loss_actor", "loss_qvalue", "loss_alpha", "alpha", "grad_norm"):
                assert float(g[key]) == pytest.approx(float(e[key]), rel=1e-4, abs=1e-6), (
                    f"{key} at step {step}"
                )
        assert group.version == reference.version == 50
        # the whole loss module: actor, Q-networks, their targets (soft updates) and alpha
        difference = max_difference(group.learner.weights(), reference.weights())
        print(f"sac: max |group - one Learner| after 50 steps: {difference:.2e}")
        assert difference <= ATOL
        state = group.state_dict()
        assert state["target_updater"] == reference.state_dict()["target_updater"]
        assert_same(group.pool.call(1, "state_dict", timeout_s=60), state)
    finally:
        torch.set_num_threads(threads)
        if group is not None:
            group.shutdown()
        buffer.shutdown()


@pytest.fixture(scope="module")
def group(ray_module_clean):
    """Two SAC ranks shared by the tests below, which need no fresh state (the killed rank's test
    comes last: it restarts the group)."""
    policy_factory, learner_factory = sac_factories()
    group = LearnerGroup(
        fresh_learner(policy_factory, learner_factory), num_learners=2,
        policy_factory=policy_factory, learner_factory=learner_factory,
        resources={"num_cpus": 0.5},
    )  # fmt: skip
    yield group
    group.shutdown()


def test_a_group_refuses_a_batch_smaller_than_its_ranks(group, ray_clean):
    held = RayReplayBuffer(
        storage=functools.partial(LazyTensorStorage, 16), batch_size=1, **ray_buffer_kwargs()
    )
    buffer = BoundedRayBuffer(held, timeout_s=60.0)
    try:
        with pytest.raises(ValueError, match=r"num_learners=2 is more than the replay buffer's "):
            group.replay_updates(buffer, 1)
        assert group.replay_updates(buffer, 0) == []
    finally:
        buffer.shutdown()


def test_each_replay_rank_writes_its_priorities_back_to_a_prioritized_ray_held_buffer(
    group, ray_clean
):
    """Two ranks sample their halves of a prioritized Ray-held buffer; both write td_errors back."""
    import numpy as np

    from tdscheme.replay.prioritized import prioritized_sampler

    held = RayReplayBuffer(
        storage=functools.partial(LazyTensorStorage, FRAMES),
        sampler=functools.partial(prioritized_sampler, FRAMES, 0.6, 0.4),
        batch_size=BATCH, **ray_buffer_kwargs(TensorDictReplayBuffer),
    )  # fmt: skip
    buffer = BoundedRayBuffer(held, timeout_s=60.0)

    def leaves() -> np.ndarray:
        def read(rb):
            return np.asarray(rb.sampler._sum_tree[np.arange(FRAMES)], dtype=np.float64)

        return ray.get(held._rb.__ray_call__.remote(read), timeout=60)

    try:
        buffer.extend(pendulum_frames())
        assert buffer.prioritized and np.all(leaves() == 1.0)  # new frames at the max priority, 1
        metrics = group.replay_updates(buffer, 1)
        assert float(metrics[0]["num_frames"]) == BATCH
        written = int((leaves() != 1.0).sum())
        # each rank sampled BATCH / 2 = 32 frames; more than 32 frames rewritten: both ranks wrote
        assert 32 < written <= BATCH, written
    finally:
        buffer.shutdown()


def rank_pid(group: LearnerGroup, rank: int) -> int:
    actor = group.pool.actors()[rank]
    return ray.get(actor.__ray_call__.remote(lambda self: os.getpid()), timeout=60)


def test_a_killed_replay_rank_is_rebuilt_with_its_buffer_and_the_ranks_stay_identical(
    group, caplog
):
    # no ray_clean: the rebuilt rank outlives the test, in the module's group (ray_module_clean
    # checks that the group and this buffer are gone after the module)
    held = RayReplayBuffer(
        storage=functools.partial(LazyTensorStorage, FRAMES), batch_size=BATCH,
        **ray_buffer_kwargs(),
    )  # fmt: skip
    buffer = BoundedRayBuffer(held, timeout_s=60.0)
    try:
        buffer.extend(pendulum_frames())
        restarts, version = group.restarts, group.version
        for call in range(4):
            if call == 2:
                os.kill(rank_pid(group, 1), signal.SIGKILL)
            assert len(group.replay_updates(buffer, 5)) == 5
        assert group.restarts == restarts + 1 and group.version == version + 20
        assert (
            f"learner group: restarting (restart {restarts + 1}): rank(s) [1] lost" in caplog.text
        )
        # the rebuilt rank samples its share again (it was given the buffer) and matches rank 0
        assert_same(group.pool.call(1, "state_dict", timeout_s=60), group.state_dict())
    finally:
        buffer.shutdown()
