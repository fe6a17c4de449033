"""Learner groups: two gloo ranks take the steps one Learner takes on the whole batch."""

from __future__ import annotations

import os
import signal
from functools import partial

import pytest
import ray
import torch
from tensordict import TensorDict
from torchrl.collectors import Collector

from tdscheme.errors import LearnerGroupError
from tdscheme.learner.group import LearnerGroup, split_rows
from tdscheme.presets import get_preset
from tdscheme.testing import assert_same, make_env, seed_collector

ATOL = 1e-6
SEED = 3


def ppo_factories(name: str = "ppo-cartpole", **overrides):
    settings = {"hidden_sizes": [16], "num_epochs": 2, "minibatch_size": 48}
    if name == "a2c-cartpole":  # one step on the whole batch per update
        settings = {"hidden_sizes": [16]}
    preset = get_preset(name).override({**settings, **overrides})
    return preset.policy_factory(), preset.learner_factory()


def cartpole_batches(policy_factory, count: int, *, num_envs: int = 6) -> list[TensorDict]:
    torch.manual_seed(0)
    collector = Collector(
        partial(make_env, "CartPole-v1", num_envs=num_envs), policy_factory()["actor"],
        frames_per_batch=num_envs * 20, total_frames=-1, auto_register_policy_transforms=False,
    )  # fmt: skip
    try:
        seed_collector(collector, 0)
        batches = []
        for batch in collector:
            batches.append(batch.clone())
            if len(batches) == count:
                return batches
    finally:
        collector.shutdown()


def fresh_learner(policy_factory, learner_factory):
    torch.manual_seed(0)
    return learner_factory(**policy_factory())


def max_difference(a: TensorDict, b: TensorDict) -> float:
    assert set(a.keys(True, True)) == set(b.keys(True, True))
    return max(float((a.get(k) - b.get(k)).abs().max()) for k in a.keys(True, True))


def test_split_rows_keeps_whole_env_rows():
    batch = TensorDict(x=torch.arange(24).reshape(2, 3, 4), batch_size=[2, 3, 4])
    shards = split_rows(batch, 2)
    assert [tuple(s.shape) for s in shards] == [(3, 4), (3, 4)]
    assert torch.equal(torch.cat([s["x"] for s in shards]), batch["x"].reshape(6, 4))
    with pytest.raises(ValueError, match=r"num_learners=7 is more than the 6 env rows"):
        split_rows(batch, 7)
    with pytest.raises(ValueError, match=r"splits batches by env rows"):
        split_rows(TensorDict(x=torch.zeros(5), batch_size=[5]), 2)


@pytest.mark.parametrize(
    "name", ["ppo-cartpole", "appo-cartpole", pytest.param("a2c-cartpole", marks=pytest.mark.fast)]
)
def test_two_ranks_equal_one_learner_on_the_whole_batch(ray_clean, name):
    # ppo: GAE, normalized advantages, 3 minibatches x 2 epochs; appo: the same on V-trace
    policy_factory, learner_factory = ppo_factories(name)
    batches = cartpole_batches(policy_factory, 5)
    reference = fresh_learner(policy_factory, learner_factory)
    if name != "a2c-cartpole":
        assert reference.loss_module.normalize_advantage  # normalized over both ranks' frames
    group = LearnerGroup(
        fresh_learner(policy_factory, learner_factory), num_learners=2,
        policy_factory=policy_factory, learner_factory=learner_factory, seed=SEED,
    )  # fmt: skip
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each rank: the same kernels, only the split sums differ
    try:
        torch.manual_seed(SEED)  # the one Learner's minibatch order: the group's generator
        for update in range(50):
            expected = reference.update(batches[update % len(batches)])
            got = group.update(batches[update % len(batches)])
            assert got["num_frames"] == expected["num_frames"] == 120
            for key in ("loss", "loss_objective", "loss_critic", "grad_norm", "lr"):
                if key not in expected.keys():
                    continue
                # the sums of two halves round differently from the sum of the whole: a frame
                # whose ratio sits on a clip boundary can fall on the other side of it in one
                # update (seen in CI: a metric off by 2.5e-4; appo's loss_objective at update 47
                # off by 2.3e-5, rel 2.3e-3, stop 47); parameters stay within ATOL
                assert float(got[key]) == pytest.approx(float(expected[key]), rel=1e-3, abs=1e-4), (
                    f"{key} at update {update}"
                )
        assert group.version == reference.version == 50
        difference = max_difference(group.learner.weights(), reference.weights())
        print(f"{name}: max |group - one Learner| after 50 updates: {difference:.2e}")
        assert difference <= ATOL
        rank1 = group.pool.call(1, "state_dict", timeout_s=60)
        assert_same(rank1, group.state_dict())  # bit-identical ranks
        gang = group._gang.id.hex()  # the ranks were placed together, in one placement group
        assert ray.util.placement_group_table()[gang]["state"] == "CREATED"
    finally:
        torch.set_num_threads(threads)
        group.shutdown()
    assert ray.util.placement_group_table()[gang]["state"] == "REMOVED"


def rank_pid(group: LearnerGroup, rank: int) -> int:
    actor = group.pool.actors()[rank]
    return ray.get(actor.__ray_call__.remote(lambda self: os.getpid()), timeout=60)


def test_a_killed_or_hung_rank_restarts_the_group_and_training_stays_exact(ray_clean, caplog):
    """Rank 1 killed before update 3, then hung in update 6: each time it is named, killed
    (the hung one) and replaced, and the group still takes one Learner's steps."""
    policy_factory, learner_factory = ppo_factories()
    batches = cartpole_batches(policy_factory, 3)
    reference = fresh_learner(policy_factory, learner_factory)
    group = LearnerGroup(
        fresh_learner(policy_factory, learner_factory), num_learners=2, timeout_s=3.0,
        policy_factory=policy_factory, learner_factory=learner_factory, seed=SEED,
    )  # fmt: skip
    try:
        torch.manual_seed(SEED)
        for update in range(8):
            if update == 3:
                os.kill(rank_pid(group, 1), signal.SIGKILL)
            if update == 6:  # busy in another call: it never joins the update's collectives
                group.pool.actors()[1].__ray_call__.remote(
                    lambda self: __import__("time").sleep(120)
                )
            reference.update(batches[update % 3])
            metrics = group.update(batches[update % 3])
            assert int(metrics["num_frames"]) == 120 and group.version == update + 1
            if update == 3:
                assert group.restarts == 1
                assert "learner group: restarting (restart 1): rank(s) [1] lost" in caplog.text
        assert group.restarts == 2
        assert group.pool.restart_count(1) == 2 and group.pool.restart_count(0) == 0
        assert (
            "restarting (restart 2): rank(s) [1] lost: 1: did not finish an update in "
            "timeout_s=3 s (hung)" in caplog.text
        )
        # rolled back and retried: the same steps as one Learner, on both ranks
        assert max_difference(group.learner.weights(), reference.weights()) <= ATOL
        assert_same(group.pool.call(1, "state_dict", timeout_s=60), group.state_dict())
    finally:
        group.shutdown()


def test_nan_in_one_rank_skips_the_update_everywhere_and_a_rank_error_breaks_the_group(ray_clean):
    """One group, in turn: a non-finite shard skips the update on every rank (and the next
    one steps); then an exception in a rank reaches the driver with its traceback, and the
    group refuses further updates."""
    policy_factory, learner_factory = ppo_factories()
    batch = cartpole_batches(policy_factory, 1)[0]
    poisoned = batch.clone()
    poisoned["next", "reward"][-1, 3] = float("nan")  # an env row of the last rank's shard
    group = LearnerGroup(
        fresh_learner(policy_factory, learner_factory), num_learners=2, timeout_s=10.0,
        policy_factory=policy_factory, learner_factory=learner_factory,
    )  # fmt: skip
    try:
        before = group.state_dict()
        metrics = group.update(poisoned)
        assert float(metrics["nonfinite_skipped"]) == 1.0 and group.version == 0
        for rank in (0, 1):  # neither rank stepped
            assert_same(group.pool.call(rank, "state_dict", timeout_s=60), before)
        group.update(batch)
        assert group.version == 1
        with pytest.raises(
            LearnerGroupError, match=r"learner rank \d: update raised AttributeError"
        ) as info:
            group.update(batch.exclude("action"))
        assert "remote traceback (learner rank" in str(info.value)
        with pytest.raises(RuntimeError, match="learner group is broken"):
            group.update(batch)
    finally:
        group.shutdown()


@pytest.mark.fast
def test_a_group_the_cluster_cannot_hold_is_refused_naming_the_request(ray_clean):
    from tdscheme.errors import PlacementError

    policy_factory, learner_factory = ppo_factories()
    with pytest.raises(PlacementError, match=r"num_learners / learner_resources"):
        LearnerGroup(
            fresh_learner(policy_factory, learner_factory), num_learners=3,
            policy_factory=policy_factory, learner_factory=learner_factory,
            resources={"num_cpus": 1},
        )  # fmt: skip
    with pytest.raises(ValueError, match=r"num_learners=0 is invalid; accepted: an int >= 1"):
        LearnerGroup(
            fresh_learner(policy_factory, learner_factory), num_learners=0,
            policy_factory=policy_factory, learner_factory=learner_factory,
        )  # fmt: skip
