"""The staged loop says where ("next", obs) differs from obs one step on: the codec's comparison, skipped."""

from __future__ import annotations

import functools

import gymnasium as gym
import pytest
import torch
from torchrl.envs import GymWrapper

from tdscheme.envs import make_env
from tdscheme.rollout.lean import LeanCollector
from tdscheme.testing import mlp_policy, seed_collector
from tdscheme.transport import TensorDictCodec
from tdscheme.transport.next_fold import _noted_differences, fold_leaf, folded_keys


def bitwise_differences(td, key):
    """[rows, steps - 1]: where td["next", key][..., t] is not td[key][..., t + 1], bit for bit."""
    here, there = td[key], td["next", key]
    rows, steps = here.shape[0], here.shape[1]
    a = there[:, :-1].reshape(rows, steps - 1, -1).view(torch.int32)
    b = here[:, 1:].reshape(rows, steps - 1, -1).view(torch.int32)
    return (a != b).any(-1)


def same_step_cartpoles(num_envs=4):
    copies = [functools.partial(gym.make, "CartPole-v1")] * num_envs
    mode = gym.vector.AutoresetMode.SAME_STEP
    return GymWrapper(gym.vector.SyncVectorEnv(copies, autoreset_mode=mode))


@pytest.mark.parametrize(
    "env_fn",
    [functools.partial(make_env, "CartPole-v1", num_envs=4), same_step_cartpoles],
    ids=["disabled", "same_step"],
)
def test_the_noted_differences_are_the_bitwise_ones_and_lapse_on_a_write(env_fn):
    torch.manual_seed(0)
    env = env_fn()
    collector = LeanCollector(
        env, mlp_policy(4, 2), frames_per_batch=4 * 40, auto_register_policy_transforms=False
    )
    collector.return_same_td = True  # as a worker actor runs it (reuse_batch_buffer)
    seed_collector(collector, 1)
    try:
        ended = 0
        for _, batch in zip(range(3), collector, strict=False):
            noted = _noted_differences(batch["observation"], batch["next", "observation"])
            assert noted is not None  # the staged loop ran and said where
            assert torch.equal(noted, bitwise_differences(batch, "observation"))
            ended += int(noted.sum())
            # what goes on the wire is what the comparison would send
            entry, buffers = fold_leaf(
                ("next", "observation"), batch["observation"], batch["next", "observation"], 2
            )
            assert entry[-1] == int(noted.sum())
        assert ended >= 3  # episodes ended inside the batches
        # any write into either leaf after the loop: the note no longer holds
        batch["observation"][0, 0] += 1.0
        assert _noted_differences(batch["observation"], batch["next", "observation"]) is None
    finally:
        collector.shutdown()


def test_a_replaced_leaf_is_compared_bit_for_bit():
    torch.manual_seed(0)
    collector = LeanCollector(
        make_env("CartPole-v1", num_envs=4), mlp_policy(4, 2), frames_per_batch=4 * 40,
        auto_register_policy_transforms=False,
    )  # fmt: skip
    seed_collector(collector, 1)
    try:
        batch = next(iter(collector)).clone()  # new tensors: nothing noted of them
        assert _noted_differences(batch["observation"], batch["next", "observation"]) is None
        batch["next", "observation"][1, 5] = 7.0  # a difference no note knows of
        codec = TensorDictCodec(fold_next_bytes=0)
        payload = codec.encode(batch)
        assert "next.observation" in folded_keys(payload)
        back = codec.decode(payload)
        assert torch.equal(back["next", "observation"], batch["next", "observation"])
    finally:
        collector.shutdown()
