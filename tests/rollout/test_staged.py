"""The staged loop gives the per-step lean loop's batches, frame for frame, for every env kind it steps."""

from __future__ import annotations

import functools

import gymnasium as gym
import pytest
import torch
from tensordict.nn import TensorDictModule
from torchrl.envs import Compose, DoubleToFloat, RewardSum, StepCounter
from torchrl.envs.transforms import ObservationNorm, RewardClipping, RewardScaling

from tdscheme.envs import make_env, wrap_gym_env
from tdscheme.keys import MASK_KEY
from tdscheme.rollout import lean, staged
from tdscheme.rollout.lean import LeanCollector
from tdscheme.testing import mlp_policy, seed_collector


def cartpole_vector(num_envs=6):
    """CartPole's own one-call NEXT_STEP vector env, as ``gym.make_vec`` builds it."""
    return wrap_gym_env(gym.make_vec("CartPole-v1", num_envs=num_envs))


def pendulum_async(num_envs=3):
    """Float rewards and truncations: an AsyncVectorEnv (NEXT_STEP) of 30-step Pendulums."""
    return wrap_gym_env(
        gym.make_vec(
            "Pendulum-v1", num_envs=num_envs, vectorization_mode="async", max_episode_steps=30
        )
    )


def bookkeeping(obs_dim):
    """Episode sums and counts, reward maps around them, fixed observation statistics."""
    norm = ObservationNorm(
        loc=torch.full((obs_dim,), 0.1), scale=torch.full((obs_dim,), 2.0), in_keys=["observation"]
    )
    return [
        RewardSum(), RewardScaling(loc=0.25, scale=0.5), StepCounter(), RewardClipping(-3.0, 0.4),
        norm,
    ]  # fmt: skip


def collect(env_fn, policy, *, staged_on, steps=45, num_batches=3, seed=3, **kwargs):
    """Batches of a LeanCollector with the staged loop on, or forced off (the per-step loop)."""
    ran = []
    real = staged.can_stage

    def decide(collector, stepper, call):
        ran.append(real(collector, stepper, call) and staged_on)
        return ran[-1]

    torch.manual_seed(seed)
    env = env_fn()
    collector = LeanCollector(
        env, policy, frames_per_batch=steps * env.batch_size.numel(),
        auto_register_policy_transforms=False, **kwargs,
    )  # fmt: skip
    lean.can_stage = decide
    try:
        seed_collector(collector, seed)
        it = iter(collector)
        out = [next(it).clone() for _ in range(num_batches)]
        state = collector._carrier.clone()
    finally:
        lean.can_stage = real
        collector.shutdown()
    assert collector.lean_reason is None and all(r == staged_on for r in ran), ran
    return out, state


def assert_same(want, got):
    for w, g in zip(want, got, strict=True):
        assert sorted(g.keys(True, True), key=str) == sorted(w.keys(True, True), key=str)
        for key in w.keys(True, True):
            assert g[key].dtype == w[key].dtype, key
            assert torch.equal(g[key], w[key]), key


def same_step_cartpoles(num_envs=6):
    copies = [functools.partial(gym.make, "CartPole-v1")] * num_envs
    mode = gym.vector.AutoresetMode.SAME_STEP
    return wrap_gym_env(gym.vector.SyncVectorEnv(copies, autoreset_mode=mode))


@pytest.mark.parametrize(
    "env_fn",
    [
        functools.partial(make_env, "CartPole-v1", num_envs=6),  # DISABLED: reset_mask
        same_step_cartpoles,  # the final observations swapped with the resets'
        functools.partial(make_env, "CartPole-v1"),  # one env: reset()
    ],
    ids=["disabled", "same_step", "one_env"],
)
def test_envs_reset_by_the_loop_staged_equals_per_step(env_fn):
    """Each step after a reset starts from the reset's observations (normalized), not the step's."""
    torch.manual_seed(5)
    policy = mlp_policy(4, 2)

    def transformed():
        return env_fn().append_transform(Compose(*bookkeeping(4)))

    want, want_carrier = collect(transformed, policy, staged_on=False)
    got, got_carrier = collect(transformed, policy, staged_on=True)
    assert_same(want, got)
    assert_same([want_carrier], [got_carrier])
    assert bool(torch.cat([b["next", "done"] for b in got], -2).sum() > 2)


@pytest.mark.parametrize("transforms", [False, True])
def test_cartpoles_vector_env_staged_equals_per_step(transforms):
    """Reset steps padded out, traj ids, RewardSum / StepCounter held through them."""
    torch.manual_seed(0)
    policy = mlp_policy(4, 2)

    def env_fn():
        env = cartpole_vector()
        return env.append_transform(Compose(*bookkeeping(4))) if transforms else env

    want, want_carrier = collect(env_fn, policy, staged_on=False)
    got, got_carrier = collect(env_fn, policy, staged_on=True)
    assert_same(want, got)
    assert_same([want_carrier], [got_carrier])  # the next batch starts from the same state
    mask = torch.cat([b[MASK_KEY] for b in got], 1)
    assert not mask.all()  # reset steps happened (and were packed out)
    ids = torch.cat([b["collector", "traj_ids"] for b in got], 1)
    assert ids.max() > ids.min() + 6  # episodes ended, new ids handed out


def test_float_rewards_and_truncations_staged_equals_per_step():
    """Pendulum: float sums (bit for bit), DoubleToFloat, scaling, clipping, time-limit ends."""
    torch.manual_seed(1)
    policy = mlp_policy(3, 1, discrete=False)

    def env_fn():
        return pendulum_async().append_transform(Compose(DoubleToFloat(), *bookkeeping(3)))

    want, _ = collect(env_fn, policy, staged_on=False, steps=40)
    got, _ = collect(env_fn, policy, staged_on=True, steps=40)
    assert_same(want, got)
    assert bool(torch.cat([b["next", "truncated"] for b in got], 1).any())


@pytest.mark.parametrize(
    "env_fn",
    [cartpole_vector, functools.partial(make_env, "CartPole-v1", num_envs=5)],
    ids=["next_step", "disabled"],
)
def test_compact_obs_staged_equals_per_step(env_fn):
    """torchrl's compact layout (no ("next", obs)): each step's observation still the right one.

    (The staged loop writes a step's next observations straight into the next step's
    row; the loop's resets of a DISABLED env then overwrite the reset copies' rows.)
    """
    torch.manual_seed(2)
    policy = mlp_policy(4, 2)
    want, _ = collect(env_fn, policy, staged_on=False, compact_obs=True)
    got, _ = collect(env_fn, policy, staged_on=True, compact_obs=True)
    assert ("next", "observation") not in got[0].keys(True, True)
    assert_same(want, got)


def test_envpool_staged_equals_per_step():
    pytest.importorskip("envpool")

    torch.manual_seed(3)
    net = torch.nn.Linear(4, 2)  # EnvPool's CartPole takes index actions
    policy = TensorDictModule(lambda obs: net(obs).argmax(-1), ["observation"], ["action"])

    def env_fn():
        env = make_env("CartPole-v1", num_envs=4, backend="envpool")
        return env.append_transform(Compose(RewardSum(), StepCounter()))

    want, _ = collect(env_fn, policy, staged_on=False)
    got, _ = collect(env_fn, policy, staged_on=True)
    assert_same(want, got)


def test_a_policy_reading_more_than_observations_runs_per_step():
    """Traj ids or done flags as policy inputs: the staged loop would not have them per step."""
    torch.manual_seed(4)
    net = mlp_policy(4, 2).module
    policy = TensorDictModule(
        lambda obs, ids: net(obs), in_keys=["observation", ("collector", "traj_ids")],
        out_keys=["action"],
    )  # fmt: skip
    batches, _ = collect(cartpole_vector, policy, staged_on=False, num_batches=1)
    assert batches[0]["action"].shape == (6, 45, 2)


def test_a_sampling_tensordict_policy_staged_equals_per_step():
    """A ProbabilisticActor (not a plain module): called on the observations, same samples."""
    from tensordict.nn import InteractionType, ProbabilisticTensorDictModule, TensorDictSequential
    from torch.distributions import OneHotCategorical

    torch.manual_seed(6)
    net = TensorDictModule(mlp_policy(4, 2).module[:-1], ["observation"], ["logits"])
    sample = ProbabilisticTensorDictModule(
        in_keys=["logits"], out_keys=["action"], distribution_class=OneHotCategorical,
        return_log_prob=True, default_interaction_type=InteractionType.RANDOM,
    )  # fmt: skip
    policy = TensorDictSequential(net, sample)
    want, _ = collect(
        cartpole_vector, policy, staged_on=False, exploration_type=InteractionType.RANDOM
    )
    got, _ = collect(
        cartpole_vector, policy, staged_on=True, exploration_type=InteractionType.RANDOM
    )
    assert_same(want, got)
    assert {"logits", "action_log_prob"} <= set(got[0].keys())


class OneOutputBuffer(torch.nn.Module):
    """Writes each step's one-hot action into the same tensor (a policy keeping its output).

    It pushes the cart towards the pole's lean, so that its actions change from step to step.
    """

    def __init__(self):
        super().__init__()
        self.out = torch.zeros(6, 2, dtype=torch.int64)

    def forward(self, obs):
        lean = (obs[..., 2] > 0).long()
        return self.out.copy_(torch.nn.functional.one_hot(lean, 2))


def test_a_policy_writing_into_one_output_tensor_staged_equals_per_step():
    """Each step's outputs are copied into the batch before the next call writes over them."""
    torch.manual_seed(7)
    policy = TensorDictModule(OneOutputBuffer(), ["observation"], ["action"])
    want, want_carrier = collect(cartpole_vector, policy, staged_on=False)
    got, got_carrier = collect(cartpole_vector, policy, staged_on=True)
    assert_same(want, got)
    assert_same([want_carrier], [got_carrier])
    actions = torch.cat([b["action"][b[MASK_KEY]] for b in got])
    assert 0 < int(actions[:, 0].sum()) < len(actions)  # both actions taken: not one step's


def test_index_actions_on_cartpoles_vector_env_staged_equals_per_step():
    """categorical_action_encoding: the policy's index goes to the env as it is."""
    torch.manual_seed(8)
    net = mlp_policy(4, 2).module[:-1]  # the logits: mlp_policy's one-hot head dropped
    policy = TensorDictModule(lambda obs: net(obs).argmax(-1), ["observation"], ["action"])

    def env_fn():
        return wrap_gym_env(
            gym.make_vec("CartPole-v1", num_envs=6), categorical_action_encoding=True
        )

    want, _ = collect(env_fn, policy, staged_on=False)
    got, _ = collect(env_fn, policy, staged_on=True)
    assert_same(want, got)
    assert got[0]["action"].shape == (6, 45)


class InputLayouts(torch.nn.Module):
    """Records the strides of each observation it reads (a matrix product's rounding may
    depend on them), acting on the pole's lean."""

    def __init__(self):
        super().__init__()
        self.strides = []

    def forward(self, obs):
        self.strides.append(obs.stride())
        return torch.nn.functional.one_hot((obs[..., 2] > 0).long(), 2)


def test_the_policy_reads_the_envs_layout_staged_as_per_step():
    """CartPole's vector env returns column-major arrays: the staged policy reads them so,
    as the per-step loop and torchrl do, not the batch's row of the same values."""
    runs = []
    for staged_on in (False, True):
        module = InputLayouts()
        policy = TensorDictModule(module, ["observation"], ["action"])
        collect(cartpole_vector, policy, staged_on=staged_on, num_batches=1)
        runs.append(module.strides)
    assert runs[0] == runs[1]
    assert (1, 6) in runs[1]  # the env's layout, not the [envs, time] batch's row (4, 1)


def pixel_cartpoles(mode, num_envs=4):
    """CartPoles observing uint8 4x16x16 frames (each the step count) in a SyncVectorEnv."""
    from tdscheme.envs.faulty import PixelsLikeObs

    copies = [lambda: PixelsLikeObs(gym.make("CartPole-v1"), (4, 16, 16))] * num_envs
    autoreset = gym.vector.AutoresetMode[mode]
    return wrap_gym_env(gym.vector.SyncVectorEnv(copies, autoreset_mode=autoreset))


class FramePolicyNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4 * 16 * 16, 2)

    def forward(self, frames):
        logits = self.linear(frames.flatten(-3).float() / 255)
        return torch.nn.functional.one_hot(logits.argmax(-1), 2)


@pytest.mark.parametrize("compact_obs", [False, True], ids=["full", "compact"])
@pytest.mark.parametrize(
    "env_fn, policy",
    [
        (functools.partial(make_env, "CartPole-v1", num_envs=6), lambda: mlp_policy(4, 2)),
        (same_step_cartpoles, lambda: mlp_policy(4, 2)),
        (functools.partial(pixel_cartpoles, "DISABLED"),
         lambda: TensorDictModule(FramePolicyNet(), ["observation"], ["action"])),
        (functools.partial(pixel_cartpoles, "SAME_STEP"),
         lambda: TensorDictModule(FramePolicyNet(), ["observation"], ["action"])),
    ],
    ids=["disabled", "same_step", "pixels_disabled", "pixels_same_step"],
)  # fmt: skip
def test_copies_stepped_in_place_staged_equals_per_step(monkeypatch, env_fn, policy, compact_obs):
    """The copies' observations go through the stepper's own array into the batch's rows
    (no copy per step): the same frames, episode sums and counts beside them."""
    used = []
    real = staged._direct_rows
    monkeypatch.setattr(staged, "_direct_rows", lambda *a: used.append(real(*a)) or used[-1])
    torch.manual_seed(5)
    net = policy()

    def transformed():
        return env_fn().append_transform(Compose(RewardSum(), StepCounter()))

    kwargs = {"compact_obs": True} if compact_obs else {}
    want, want_carrier = collect(transformed, net, staged_on=False, **kwargs)
    got, got_carrier = collect(transformed, net, staged_on=True, **kwargs)
    assert used and all(rows is not None for rows in used)
    assert_same(want, got)
    assert_same([want_carrier], [got_carrier])
    assert bool(torch.cat([b["next", "done"] for b in got], -2).sum() > 2)
