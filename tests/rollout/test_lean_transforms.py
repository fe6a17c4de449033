"""Frame stacking and running normalization on the lean path: torchrl's frames, torchrl's state.

``CatFrames`` and ``VecNorm`` keep a state of their own (a buffer of frames per env copy,
running statistics). The lean loop calls their own ``_step`` and ``_reset``; these tests
check the batches against torchrl's ``Collector`` frame for frame, and the transforms'
state after the batches (what a checkpoint saves) too.
"""

from __future__ import annotations

import functools
import importlib.util

import gymnasium as gym
import pytest
import torch
from tensordict.nn import TensorDictModule
from torchrl.envs import (
    CatFrames,
    Compose,
    DoubleToFloat,
    GymWrapper,
    ObservationNorm,
    RewardSum,
    StepCounter,
    TransformedEnv,
    VecNorm,
    VecNormV2,
)

from tdscheme.envs import make_env
from tdscheme.rollout.lean import LeanCollector
from tdscheme.rollout.torchrl_names import Collector
from tdscheme.testing import mlp_policy

from .test_lean import PixelsPolicy, WithPixels, assert_same_frames, batches, same_step_env

pytestmark = pytest.mark.filterwarnings(
    "ignore:Support of VecNormV2 for containers with non-empty batch-size:UserWarning"
)
STEPS = 40  # CartPole episodes end after ~10 steps under these policies: resets inside batches


def run(cls, env_fn, policy, *, seed=0):
    """test_lean's ``batches``, and the env's transform state after them (it outlives shutdown)."""
    made = []

    def seeded_env():  # the collector's first reset feeds VecNorm's statistics: seeded too
        env = env_fn()
        env.set_seed(seed)
        made.append(env)
        return env

    out, reason = batches(cls, seeded_env, policy, steps=STEPS, seed=seed)
    return out, reason, flat(made[0].transform.state_dict())


def flat(state, prefix=""):
    """A transform's ``state_dict`` (nested dicts of tensors) as ``{"a.b": tensor copy}``."""
    out = {}
    for key, value in state.items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value.clone() if isinstance(value, torch.Tensor) else value
    return out


def assert_same_run(env_fn, policy, **kwargs):
    want, _, want_state = run(Collector, env_fn, policy, **kwargs)
    got, reason, got_state = run(LeanCollector, env_fn, policy, **kwargs)
    assert reason is None  # the lean rollout ran
    assert_same_frames(want, got)
    assert want_state.keys() == got_state.keys()
    for key, value in want_state.items():
        assert (
            torch.equal(got_state[key], value)
            if isinstance(value, torch.Tensor)
            else (got_state[key] == value)
        ), key
    done = torch.cat([b["next", "done"].reshape(-1) for b in got])
    assert done.any() and not done.all()  # episodes end and reset inside the batches
    return got


def stack(n, **kwargs):
    return CatFrames(N=n, dim=-1, in_keys=["observation"], **kwargs)


# name -> (the transforms, frames stacked: the policy reads 4 x that many values). Built
# anew per env: a cloned CatFrames shares its lazy buffer with the original (torchrl).
CASES = {
    "CatFrames": (lambda: [stack(4), RewardSum(), StepCounter()], 4),
    "ObservationNorm, then CatFrames padded with a constant": (
        lambda: [
            ObservationNorm(loc=0.5, scale=2.0, in_keys=["observation"]),
            stack(3, padding="constant", padding_value=-1.0),
        ],
        3,
    ),
    "VecNorm of observations and rewards, then RewardSum": (
        lambda: [
            VecNorm(in_keys=["observation", "reward"], decay=0.99, new_api=False),
            RewardSum(),
        ],
        1,
    ),
    "RewardSum, then VecNormV2, StepCounter(max_steps)": (
        lambda: [
            RewardSum(),
            VecNormV2(in_keys=["observation", "reward"], decay=0.99),
            StepCounter(max_steps=7),
        ],
        1,
    ),
    "VecNormV2, then CatFrames": (
        lambda: [VecNormV2(in_keys=["observation"], decay=0.9), stack(2), StepCounter()],
        2,
    ),
}


@pytest.mark.filterwarnings("ignore:This class is to be deprecated:FutureWarning")
@pytest.mark.parametrize("num_envs", [1, 8])
@pytest.mark.parametrize("case", sorted(CASES))
def test_frame_stacks_and_running_norms_match_torchrls(case, num_envs):
    transforms, frames = CASES[case]

    def env_fn():
        return TransformedEnv(make_env("CartPole-v1", num_envs=num_envs), Compose(*transforms()))

    torch.manual_seed(0)
    got = assert_same_run(env_fn, mlp_policy(4 * frames, 2))
    obs = got[1]["next", "observation"]
    assert obs.shape[-1] == 4 * frames
    if "VecNorm" in case:  # normalized: roughly centred, not CartPole's raw scale
        assert obs.abs().max() < 10 and not torch.equal(obs, got[1]["observation"])
    if case.startswith("CatFrames"):  # the stack shifts by one frame per step
        nxt, cur = got[1]["next", "observation"], got[1]["observation"]
        kept = ~got[1]["next", "done"].squeeze(-1)
        assert torch.equal(nxt[kept][..., :-4], cur[kept][..., 4:])


def test_stacked_uint8_pixels_match_torchrls():
    """CatFrames over uint8 pixels beside the state (a gymnasium Dict), along the image's dim -3."""

    def env_fn():
        make = functools.partial(lambda: WithPixels(gym.make("CartPole-v1")))
        mode = gym.vector.AutoresetMode.DISABLED
        vector = gym.vector.SyncVectorEnv([make] * 4, autoreset_mode=mode)
        return TransformedEnv(GymWrapper(vector), CatFrames(N=3, dim=-3, in_keys=["pixels"]))

    torch.manual_seed(0)
    policy = TensorDictModule(PixelsPolicy(), ["pixels", "observation"], ["action"])
    got = assert_same_run(env_fn, policy)
    assert got[0]["pixels"].dtype == torch.uint8 and got[0]["pixels"].shape[-3:] == (18, 6, 3)


def test_same_step_vector_env_with_a_stack_and_a_running_norm_matches_torchrls():
    def env_fn():
        env = same_step_env("CartPole-v1", 4)
        env.append_transform(VecNormV2(in_keys=["observation"], decay=0.9))
        env.append_transform(stack(2))
        return env

    torch.manual_seed(0)
    assert_same_run(env_fn, mlp_policy(8, 2))


@pytest.mark.skipif(importlib.util.find_spec("envpool") is None, reason="envpool not installed")
def test_envpool_envs_with_a_stack_or_a_running_norm_say_why():
    """torchrl's own path fails there (its MultiThreadedEnv keeps the stacked observations)."""
    for transform in (stack(2), VecNormV2(in_keys=["observation"])):
        env = TransformedEnv(make_env("CartPole-v1", num_envs=2, backend="envpool"), transform)
        collector = LeanCollector(
            env,
            TensorDictModule(
                IndexPolicy(4 * transform.N if transform.__class__ is CatFrames else 4, 2),
                ["observation"],
                ["action"],
            ),
            frames_per_batch=8,
            auto_register_policy_transforms=False,
        )
        try:
            assert "over EnvPool (EnvPool stacks: stack_num)" in collector.lean_reason
        finally:
            collector.shutdown()


class IndexPolicy(torch.nn.Module):
    """Index actions (EnvPool's), greedy over a linear layer."""

    def __init__(self, obs_dim, num_actions):
        super().__init__()
        self.linear = torch.nn.Linear(obs_dim, num_actions)

    def forward(self, observation):
        return self.linear(observation).argmax(-1)


def test_a_frozen_running_norm_keeps_its_statistics():
    """``VecNorm.freeze()`` (evaluation copies): the lean loop normalizes without updating."""
    norm = VecNormV2(in_keys=["observation"], decay=0.9)
    warm = TransformedEnv(make_env("CartPole-v1", num_envs=4), norm)
    warm.rollout(20, break_when_any_done=False)  # statistics from 80 frames
    frozen = norm.clone().freeze()
    before = flat(frozen.state_dict())

    def env_fn():
        return TransformedEnv(make_env("CartPole-v1", num_envs=4), frozen.clone())

    torch.manual_seed(0)
    want, _, _ = run(Collector, env_fn, mlp_policy(4, 2))
    got, reason, state = run(LeanCollector, env_fn, mlp_policy(4, 2))
    assert reason is None
    assert_same_frames(want, got)
    assert state.keys() == before.keys()
    assert all(torch.equal(state[k], v) for k, v in before.items() if isinstance(v, torch.Tensor))
    warm.close()


@pytest.mark.parametrize(
    ("transforms", "why"),
    [
        ([CatFrames(N=2, dim=-1, in_keys=["observation"], out_keys=["stacked"])],
         "CatFrames renames keys"),
        ([VecNormV2(in_keys=["observation"], stateful=False)], "VecNormV2 is stateless"),
        ([VecNormV2(in_keys=["observation"]), DoubleToFloat()],
         "casts (DoubleToFloat) after VecNormV2"),
    ],
)  # fmt: skip
def test_stacks_and_norms_the_lean_loop_cannot_run_say_why(transforms, why):
    def env_fn():
        return TransformedEnv(make_env("CartPole-v1", num_envs=2), Compose(*transforms))

    collector = LeanCollector(
        env_fn(), mlp_policy(4, 2), frames_per_batch=8, auto_register_policy_transforms=False
    )
    try:
        assert why in collector.lean_reason
    finally:
        collector.shutdown()
