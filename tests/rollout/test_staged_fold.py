"""The staged loop says where ("next", obs) differs from obs one step on: the codec's comparison, skipped."""

from __future__ import annotations

import math

import gymnasium as gym
import pytest
import torch
from tensordict.nn import TensorDictModule
from torchrl.envs import GymWrapper

from tdscheme.envs import make_env
from tdscheme.envs.faulty import PixelsLikeObs
from tdscheme.rollout.lean import LeanCollector
from tdscheme.testing import OneHotArgmax, mlp_policy, seed_collector
from tdscheme.transport import TensorDictCodec
from tdscheme.transport.next_fold import (
    MIN_FRAME_BYTES,
    _noted_differences,
    fold_leaf,
    folded_keys,
)


def bitwise_differences(td, key):
    """[rows, steps - 1]: where td["next", key][..., t] is not td[key][..., t + 1], bit for bit."""
    here, there = td[key], td["next", key]
    rows, steps = here.shape[0], here.shape[1]
    a = there[:, :-1].reshape(rows, steps - 1, -1).view(torch.int32)
    b = here[:, 1:].reshape(rows, steps - 1, -1).view(torch.int32)
    return (a != b).any(-1)


FRAME = (4, 16, 16)  # 1 KiB of uint8: the smallest frame a collector folds (MIN_FRAME_BYTES)


class FramePolicyNet(torch.nn.Module):
    """uint8 frames -> a one-hot action (as torchrl's discrete gym envs take it)."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(math.prod(FRAME), 2)

    def forward(self, frames):
        logits = self.linear(frames.flatten(-3).float() / 255)
        return OneHotArgmax()(logits)


def pixel_cartpoles(mode, num_envs=4):
    """CartPoles observing uint8 frames (each frame the step count: consecutive ones differ)."""
    copies = [lambda: PixelsLikeObs(gym.make("CartPole-v1"), FRAME)] * num_envs
    autoreset = gym.vector.AutoresetMode[mode]
    return GymWrapper(gym.vector.SyncVectorEnv(copies, autoreset_mode=autoreset))


def collector_of(env, policy):
    """A seeded LeanCollector returning its batch buffer, as a worker actor runs it."""
    collector = LeanCollector(
        env, policy, frames_per_batch=4 * 40, auto_register_policy_transforms=False
    )
    collector.return_same_td = True  # reuse_batch_buffer
    seed_collector(collector, 1)
    return collector


def frame_policy():
    return TensorDictModule(FramePolicyNet(), ["observation"], ["action"])


@pytest.mark.parametrize("mode", ["DISABLED", "SAME_STEP"])
def test_the_noted_differences_are_the_bitwise_ones_and_lapse_on_a_write(mode):
    torch.manual_seed(0)
    collector = collector_of(pixel_cartpoles(mode), frame_policy())
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
        batch["observation"][0, 0] += 1
        assert _noted_differences(batch["observation"], batch["next", "observation"]) is None
    finally:
        collector.shutdown()


def test_a_replaced_leaf_is_compared_bit_for_bit():
    torch.manual_seed(0)
    collector = collector_of(pixel_cartpoles("DISABLED"), frame_policy())
    try:
        batch = next(iter(collector)).clone()  # new tensors: nothing noted of them
        assert _noted_differences(batch["observation"], batch["next", "observation"]) is None
        batch["next", "observation"][1, 5] = 7  # a difference no note knows of
        codec = TensorDictCodec(fold_next_bytes=MIN_FRAME_BYTES)
        payload = codec.encode(batch)
        assert "next.observation" in folded_keys(payload)
        back = codec.decode(payload)
        assert torch.equal(back["next", "observation"], batch["next", "observation"])
    finally:
        collector.shutdown()


def test_small_frames_are_not_noted():
    """CartPole's 16-byte frames are never folded: the staged loop spends nothing on a note."""
    torch.manual_seed(0)
    collector = collector_of(make_env("CartPole-v1", num_envs=4), mlp_policy(4, 2))
    try:
        batch = next(iter(collector))
        assert _noted_differences(batch["observation"], batch["next", "observation"]) is None
    finally:
        collector.shutdown()
