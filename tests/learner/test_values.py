"""One pass of the critic: the same advantages as torchrl's two passes, on real rollouts."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from tensordict import TensorDict
from torchrl.collectors import Collector
from torchrl.envs import StepCounter, TransformedEnv
from torchrl.objectives.value import GAE

from tdscheme.learner import OnePassValues
from tdscheme.learner.values import write_state_values_
from tdscheme.learner.vtrace import vtrace_estimator
from tdscheme.presets.pixel_networks import pixel_actor_critic
from tdscheme.testing import cartpole_modules, make_env, seed_collector

ATOL = 1e-6


def truncated_cartpole(num_envs: int, max_steps: int):
    # StepCounter truncates episodes (done & ~terminated): the final observation differs
    # from the next step's reset observation, as at a natural end
    return TransformedEnv(make_env("CartPole-v1", num_envs=num_envs), StepCounter(max_steps))


def rollout(num_envs: int, *, max_steps: int = 25, frames: int = 320) -> TensorDict:
    torch.manual_seed(0)
    modules = cartpole_modules(num_cells=16)
    collector = Collector(
        partial(truncated_cartpole, num_envs, max_steps), modules["actor"],
        frames_per_batch=frames, total_frames=-1, auto_register_policy_transforms=False,
    )  # fmt: skip
    try:
        seed_collector(collector, 0)
        batch = next(iter(collector)).clone()
    finally:
        collector.shutdown()
    return batch, modules


@pytest.mark.parametrize("num_envs", [1, 8])
def test_gae_advantages_equal_torchrl_two_passes(num_envs):
    batch, modules = rollout(num_envs)
    critic = modules["critic"]
    assert batch["next", "done"].any() and (batch["next", "truncated"].any())  # ends of both kinds
    one_pass = OnePassValues(GAE(gamma=0.99, lmbda=0.95, value_network=None), critic)
    two_pass = GAE(gamma=0.99, lmbda=0.95, value_network=critic)
    with torch.no_grad():
        got, want = one_pass(batch.clone()), two_pass(batch.clone())
    for key in ("advantage", "value_target", "state_value", ("next", "state_value")):
        torch.testing.assert_close(got[key], want[key], atol=ATOL, rtol=0, msg=str(key))
    ends = int(batch["next", "done"].sum())
    rows = batch.numel() // batch.shape[-1]
    # the observations, plus a "next" one only at each episode end and each row's last step
    assert one_pass.last_critic_frames <= batch.numel() + ends + rows < 2 * batch.numel()


def test_vtrace_advantages_equal_torchrl_two_passes():
    batch, modules = rollout(4)
    actor, critic = modules["actor"], modules["critic"]
    one_pass = OnePassValues(vtrace_estimator(gamma=0.99, actor=actor, critic=None), critic)
    two_pass = vtrace_estimator(gamma=0.99, actor=actor, critic=critic)
    with torch.no_grad():
        got, want = one_pass(batch.clone()), two_pass(batch.clone())
    for key in ("advantage", "value_target"):
        torch.testing.assert_close(got[key], want[key], atol=ATOL, rtol=0, msg=str(key))


def test_a_next_observation_that_is_not_the_following_one_gets_its_own_value():
    # A layout that breaks "next obs = the following obs" without a done flag (frames
    # dropped, a splice): checked, not assumed.
    batch, modules = rollout(1, max_steps=1000, frames=50)
    done = batch["next", "done"].squeeze(-1)
    assert not done[10] and not done[-1]
    batch["next", "observation"][10] += 1.0
    critic = modules["critic"]
    with torch.no_grad():
        frames = write_state_values_(batch, critic)
        want = critic(batch["next"][10:11].select("observation").clone())["state_value"]
    assert frames == 50 + int(done.sum()) + 1 + 1  # the episode ends, step 10 and the last step
    torch.testing.assert_close(batch["next", "state_value"][10:11], want, atol=ATOL, rtol=0)


def test_pixel_critic_values_match_and_the_shared_trunk_runs_fresh():
    # The pixel presets' critic (a trunk shared with the actor): no gradients here, so
    # it runs its trunk on the frames it is given.
    modules = pixel_actor_critic(6, frame_shape=(4, 84, 84), network="shallow")
    frames = torch.randint(0, 255, (2, 9, 4, 84, 84), dtype=torch.uint8)
    done = torch.zeros(2, 8, 1, dtype=torch.bool)
    done[1, 3] = True
    batch = TensorDict({
        "observation": frames[:, :8],
        "next": {"observation": frames[:, 1:].clone(), "reward": torch.randn(2, 8, 1),
                 "done": done, "terminated": done.clone()},
    }, batch_size=[2, 8])  # fmt: skip
    batch["next", "observation"][1, 3] = 0  # an episode's final frame
    with torch.no_grad():
        got = OnePassValues(GAE(gamma=0.99, lmbda=0.95, value_network=None), modules["critic"])(
            batch.clone()
        )
        want = GAE(gamma=0.99, lmbda=0.95, value_network=modules["critic"])(batch.clone())
    torch.testing.assert_close(got["advantage"], want["advantage"], atol=1e-5, rtol=1e-5)


def test_bad_input_is_named():
    modules = cartpole_modules(num_cells=8)
    with pytest.raises(ValueError, match="estimator=GAE has a value_network"):
        OnePassValues(GAE(gamma=0.9, lmbda=0.9, value_network=modules["critic"]), modules["critic"])
    compact = TensorDict(
        {"observation": torch.zeros(3, 4), "next": {"reward": torch.zeros(3, 1)}}, batch_size=[3]
    )
    with pytest.raises(ValueError, match=r"lacks the critic's in_keys \['observation'\]"):
        write_state_values_(compact, modules["critic"])
