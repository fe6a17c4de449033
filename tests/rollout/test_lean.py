"""LeanCollector yields torchrl's Collector's frames, frame for frame, faster."""

from __future__ import annotations

import functools
import importlib.util

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict.nn import TensorDictModule
from torchrl.envs import Compose, DoubleToFloat, GymWrapper, RewardSum, StepCounter, TransformedEnv
from torchrl.envs.transforms import CatFrames, ObservationNorm, RewardClipping, RewardScaling
from torchrl.envs.utils import ExplorationType

from tdscheme.collectors import CollectorWorker, WorkerSpec
from tdscheme.collectors.settings.specs import worker_specs
from tdscheme.envs import make_env
from tdscheme.presets import PRESETS, get_preset
from tdscheme.presets.actor_critic import train_env
from tdscheme.rollout.lean import LeanCollector
from tdscheme.rollout.torchrl_names import Collector
from tdscheme.rollout.worker_collector import WorkerCollector
from tdscheme.testing import bias_policy, cartpole_modules, mlp_policy, seed_collector
from tdscheme.transport import TensorDictCodec

# (env id, greedy policy): CartPole episodes end after ~10 steps under these MLPs (their
# weights drawn after torch.manual_seed(0), whatever ran before), Pendulum's (below) after 30
# steps (truncation), so batches of 40 steps hold resets.
POLICIES = {
    "CartPole-v1": lambda: mlp_policy(4, 2),
    "Pendulum-v1": lambda: mlp_policy(3, 1, discrete=False),
}


def seeded_policy(env_id: str):
    torch.manual_seed(0)
    return POLICIES[env_id]()


def short_pendulum(num_envs: int = 1) -> GymWrapper:
    """``tdscheme.envs.make_env("Pendulum-v1", num_envs=...)`` with 30-step episodes."""
    if num_envs == 1:
        return GymWrapper(gym.make("Pendulum-v1", max_episode_steps=30))
    return GymWrapper(
        gym.vector.SyncVectorEnv(
            [functools.partial(gym.make, "Pendulum-v1", max_episode_steps=30)] * num_envs,
            autoreset_mode=gym.vector.AutoresetMode.DISABLED,
        )
    )


def batches(cls, env_fn, policy, *, steps, num_batches=2, seed=0, **kwargs):
    """``num_batches`` batches of ``cls`` seeded with ``seed``; the RNG is seeded as a worker does."""
    torch.manual_seed(seed)
    env = env_fn()
    collector = cls(
        env,
        policy,
        frames_per_batch=steps * max(1, env.batch_size.numel()),
        auto_register_policy_transforms=False,
        **kwargs,
    )
    try:
        seed_collector(collector, seed)
        it = iter(collector)
        out = [next(it) for _ in range(num_batches)]
        return out, getattr(collector, "lean_reason", None)
    finally:
        collector.shutdown()


def assert_same_frames(expected, actual):
    assert len(expected) == len(actual)
    for want, got in zip(expected, actual, strict=True):
        assert sorted(got.keys(True, True), key=str) == sorted(want.keys(True, True), key=str)
        assert got.batch_size == want.batch_size and got.names == want.names
        for key in want.keys(True, True):
            assert got[key].dtype == want[key].dtype, key
            assert torch.equal(got[key], want[key]), key


@pytest.mark.parametrize("num_envs", [1, 8])
@pytest.mark.parametrize("env_id", sorted(POLICIES))
def test_lean_frames_equal_torchrls(env_id, num_envs):
    if env_id == "Pendulum-v1":
        env_fn = functools.partial(short_pendulum, num_envs)
    else:
        env_fn = functools.partial(make_env, env_id, num_envs=num_envs)
    policy = seeded_policy(env_id)
    want, _ = batches(Collector, env_fn, policy, steps=40)
    got, reason = batches(LeanCollector, env_fn, policy, steps=40)
    assert reason is None  # the lean rollout ran
    assert_same_frames(want, got)
    dones = torch.cat([b["next", "done"].flatten() for b in got])
    assert dones.sum() > 0 and not dones.all()  # resets inside the batches
    traj_ids = got[0]["collector", "traj_ids"]
    assert traj_ids.unique().numel() > num_envs  # new trajectory ids after resets


@pytest.mark.parametrize(
    "exploration_type", [ExplorationType.RANDOM, ExplorationType.DETERMINISTIC]
)
def test_exploration_of_a_probabilistic_actor_is_torchrls(exploration_type):
    torch.manual_seed(1)
    actor = cartpole_modules(num_cells=8)["actor"]
    env_fn = functools.partial(make_env, "CartPole-v1", num_envs=4)
    kwargs = {"exploration_type": exploration_type}
    want, _ = batches(Collector, env_fn, actor, steps=20, **kwargs)
    got, reason = batches(LeanCollector, env_fn, actor, steps=20, **kwargs)
    assert reason is None
    assert_same_frames(want, got)
    assert "action_log_prob" in got[0].keys()


@pytest.mark.parametrize("num_envs", [1, 4])
def test_a_reset_between_batches_and_a_constant_policy_match(num_envs):
    env_fn = functools.partial(make_env, "CartPole-v1", num_envs=num_envs)
    policy = bias_policy(4, 2, bias=0.0)  # one-hot argmax of [0, 0]: always action 0
    results = []
    for cls in (Collector, LeanCollector):
        torch.manual_seed(0)
        collector = cls(
            env_fn(), policy, frames_per_batch=25 * num_envs, auto_register_policy_transforms=False
        )
        seed_collector(collector, 3)
        it = iter(collector)
        first = next(it)
        collector.reset()  # torchrl's reset between batches: the lean loop picks up its carrier
        results.append([first, next(it), next(it)])
        collector.shutdown()
    assert_same_frames(*results)


def episode_env(env_id: str, num_envs: int, *transforms) -> TransformedEnv:
    return TransformedEnv(make_env(env_id, num_envs=num_envs), Compose(*transforms))


@pytest.mark.parametrize("num_envs", [1, 8])
@pytest.mark.parametrize("actor", ["mlp", "probabilistic"])
def test_episode_transforms_match_torchrls(num_envs, actor):
    """The presets' RewardSum / StepCounter / RewardScaling / RewardClipping envs: the lean loop."""
    # (env, the reward RewardSum adds per CartPole step: 1, or 1 * 0.5 + 1 once scaled first,
    # or 0.25 once clipped first)
    cases = {
        "presets": (lambda: train_env("CartPole-v1", num_envs=num_envs, reward_scale=0.1), 1.0),
        "scaled first": (
            lambda: episode_env(
                "CartPole-v1",
                num_envs,
                RewardScaling(loc=1.0, scale=0.5),
                RewardSum(),
                StepCounter(),
            ),
            1.5,
        ),
        "clipped first": (
            lambda: episode_env(
                "CartPole-v1", num_envs, RewardClipping(-0.25, 0.25), RewardSum(), StepCounter()
            ),
            0.25,
        ),
    }
    for name, (env_fn, per_step) in cases.items():
        torch.manual_seed(0)
        policy = mlp_policy(4, 2) if actor == "mlp" else cartpole_modules(num_cells=8)["actor"]
        want, _ = batches(Collector, env_fn, policy, steps=40)
        got, reason = batches(LeanCollector, env_fn, policy, steps=40)
        assert reason is None, name
        assert_same_frames(want, got)
        for batch in got:
            ended = batch["next", "done"]
            assert ended.any() and not ended.all(), name  # episodes end and reset inside batches
            returns = batch["next", "episode_reward"][ended]
            assert torch.equal(returns, batch["next", "step_count"][ended] * per_step), name


@pytest.mark.parametrize("num_envs", [1, 4])
@pytest.mark.parametrize("actor", ["pendulum", "probabilistic"])
def test_random_frames_then_the_policy_match_torchrls(num_envs, actor):
    """``init_random_frames``: the action spec's draws, then the policy, as torchrl's Collector."""
    if actor == "pendulum":
        env_fn = functools.partial(short_pendulum, num_envs)
        torch.manual_seed(0)
        policy = mlp_policy(3, 1, discrete=False)
    else:  # one-hot actions; the policy's log-probs are left as torchrl leaves them (zeros)
        env_fn = functools.partial(make_env, "CartPole-v1", num_envs=num_envs)
        torch.manual_seed(0)
        policy = cartpole_modules(num_cells=8)["actor"]
    steps = 20
    random_frames = 2 * steps * num_envs  # two batches of random actions, then the policy's
    kwargs = {"init_random_frames": random_frames}
    want, _ = batches(Collector, env_fn, policy, steps=steps, num_batches=3, **kwargs)
    got, reason = batches(LeanCollector, env_fn, policy, steps=steps, num_batches=3, **kwargs)
    assert reason is None
    assert_same_frames(want, got)
    assert not torch.equal(got[0]["action"], got[1]["action"])  # fresh draws per batch
    if actor == "probabilistic":
        assert (got[0]["action_log_prob"] == 0).all() and (got[2]["action_log_prob"] < 0).all()


class OwnVectorEnv(gym.vector.SyncVectorEnv):
    """A vector env the lean loop steps through its own ``step`` (not copy by copy)."""


def same_step_env(env_id: str, num_envs: int, vector_cls=gym.vector.SyncVectorEnv) -> GymWrapper:
    """A vector env that resets a copy in the step that ended its episode (30-step episodes)."""
    make = functools.partial(gym.make, env_id, max_episode_steps=30)
    mode = gym.vector.AutoresetMode.SAME_STEP
    return GymWrapper(vector_cls([make] * num_envs, autoreset_mode=mode))


@pytest.mark.parametrize("vector_cls", [gym.vector.SyncVectorEnv, OwnVectorEnv])
@pytest.mark.parametrize("env_id", sorted(POLICIES))
def test_same_step_vector_envs_match_torchrls(env_id, vector_cls):
    """SAME_STEP autoreset (torchrl's VecGymEnvTransform swaps final and reset observations)."""
    env_fn = functools.partial(same_step_env, env_id, 4, vector_cls)
    policy = seeded_policy(env_id)
    want, _ = batches(Collector, env_fn, policy, steps=40)
    got, reason = batches(LeanCollector, env_fn, policy, steps=40)
    assert reason is None
    assert_same_frames(want, got)
    done = torch.cat([b["next", "done"] for b in got], 1).squeeze(-1)
    assert done.any() and not done.all()
    # the frame after an episode's end starts the next episode: not its final observation
    nxt, first = torch.cat([b["next", "observation"] for b in got], 1), None
    first = torch.cat([b["observation"] for b in got], 1)
    assert not torch.equal(nxt[:, :-1][done[:, :-1]], first[:, 1:][done[:, :-1]])


@pytest.mark.parametrize("num_envs", [1, 8])
def test_compact_obs_batches_are_torchrls(num_envs):
    """``compact_obs=True``: no ``("next", obs)`` (nor RewardSum / StepCounter's), frame for frame."""
    cases = {
        "CartPole": functools.partial(make_env, "CartPole-v1", num_envs=num_envs),
        "Pendulum, truncated": functools.partial(short_pendulum, num_envs),
        "episode transforms": lambda: train_env("CartPole-v1", num_envs=num_envs, reward_scale=0.1),
        "SAME_STEP": functools.partial(same_step_env, "CartPole-v1", num_envs),
        "StepCounter(max_steps)": lambda: episode_env(
            "CartPole-v1", num_envs, RewardSum(), StepCounter(max_steps=7)
        ),
    }
    for name, env_fn in cases.items():
        if name == "SAME_STEP" and num_envs == 1:
            continue  # a vector env's mode
        env_id = "Pendulum-v1" if "Pendulum" in name else "CartPole-v1"
        policy = seeded_policy(env_id)
        want, _ = batches(Collector, env_fn, policy, steps=40, compact_obs=True)
        got, reason = batches(LeanCollector, env_fn, policy, steps=40, compact_obs=True)
        assert reason is None, name
        assert_same_frames(want, got)
        assert ("next", "observation") not in got[0].keys(True), name
        assert got[0]["next", "done"].any(), name  # episodes end inside the batches


class WithPixels(gym.ObservationWrapper):
    """CartPole observing a small uint8 image of its state, with the state or alone.

    With the state, a Dict (torchrl: "observation" and "pixels"); alone, an ``(H, W, 3)``
    image Box, which torchrl names "pixels".
    """

    def __init__(self, env, with_state=True):
        super().__init__(env)
        self.with_state = with_state
        pixels = gym.spaces.Box(0, 255, shape=(6, 6, 3), dtype=np.uint8)
        self.observation_space = (
            gym.spaces.Dict({"state": env.observation_space, "pixels": pixels})
            if with_state
            else pixels
        )

    def observation(self, observation):
        level = np.uint8(int(abs(observation[0]) * 1000) % 256)
        pixels = np.full((6, 6, 3), level, dtype=np.uint8)
        return {"state": observation, "pixels": pixels} if self.with_state else pixels


class PixelsPolicy(torch.nn.Module):
    """One-hot CartPole actions from the pixels (and the state when given)."""

    def __init__(self, state=True):
        super().__init__()
        self.linear = torch.nn.Linear(5 if state else 1, 2)

    def forward(self, pixels, observation=None):
        features = pixels.float().mean((-3, -2, -1)).unsqueeze(-1)
        if observation is not None:
            features = torch.cat([observation, features], -1)
        return torch.nn.functional.one_hot(self.linear(features).argmax(-1), 2)


@pytest.mark.parametrize("case", ["dict, vector env", "dict, one env", "image, one env"])
def test_pixels_and_observation_keys_match_torchrls(case):
    """Several observation keys (a gymnasium Dict, "state" -> "observation") and uint8 pixels.

    (torchrl's own rollout fails on a SAME_STEP vector env with a Dict observation: its
    final-observation reader raises StopIteration; not tested here.)
    """
    with_state = case.startswith("dict")

    def env_fn():
        make = functools.partial(lambda: WithPixels(gym.make("CartPole-v1"), with_state))
        if case.endswith("one env"):
            return GymWrapper(make())
        mode = gym.vector.AutoresetMode.DISABLED
        return GymWrapper(gym.vector.SyncVectorEnv([make] * 4, autoreset_mode=mode))

    torch.manual_seed(0)
    pixels_policy = TensorDictModule(
        PixelsPolicy(with_state),
        ["pixels", "observation"] if with_state else ["pixels"],
        ["action"],
    )
    for policy in [mlp_policy(4, 2), pixels_policy] if with_state else [pixels_policy]:
        want, _ = batches(Collector, env_fn, policy, steps=40)
        got, reason = batches(LeanCollector, env_fn, policy, steps=40)
        assert reason is None
        assert_same_frames(want, got)
        assert ("observation" in got[0].keys()) == with_state
        assert got[0]["pixels"].dtype == torch.uint8 and got[0]["next", "pixels"].any()
        assert got[0]["next", "done"].any()


def test_double_to_float_matches_torchrls():
    """A float64-observing env behind the presets' ``DoubleToFloat``: the lean loop casts."""

    def float64_pendulum():
        def make():
            space = gym.spaces.Box(-8.0, 8.0, shape=(3,), dtype=np.float64)
            env = gym.make("Pendulum-v1", max_episode_steps=30)
            return gym.wrappers.TransformObservation(env, lambda o: o.astype(np.float64), space)

        vector = gym.vector.SyncVectorEnv(
            [make] * 4, autoreset_mode=gym.vector.AutoresetMode.DISABLED
        )
        env = GymWrapper(vector)
        assert env.observation_spec["observation"].dtype == torch.float64
        norm = ObservationNorm(
            loc=torch.tensor([0.1, 0.0, -0.1]),
            scale=torch.tensor([2.0, 1.0, 0.5]),
            in_keys=["observation"],
            standard_normal=True,
        )  # normalizes the float32 observations DoubleToFloat made
        return TransformedEnv(env, Compose(DoubleToFloat(), norm, RewardSum(), StepCounter()))

    torch.manual_seed(0)
    policy = mlp_policy(3, 1, discrete=False)
    want, _ = batches(Collector, float64_pendulum, policy, steps=40)
    got, reason = batches(LeanCollector, float64_pendulum, policy, steps=40)
    assert reason is None
    assert_same_frames(want, got)
    assert got[0]["observation"].dtype == torch.float32
    assert got[0]["next", "done"].any()  # episodes end inside the batches


@pytest.mark.parametrize("num_envs", [1, 4])
def test_trajectory_batches_match_torchrls(num_envs):
    """trajs_per_batch: torchrl assembles whole trajectories from the lean rollout's batches."""
    env_fn = functools.partial(make_env, "CartPole-v1", num_envs=num_envs)
    policy = seeded_policy("CartPole-v1")
    kwargs = {"trajs_per_batch": 3, "traj_format": "padded"}
    want, _ = batches(Collector, env_fn, policy, steps=8, num_batches=3, **kwargs)
    got, reason = batches(LeanCollector, env_fn, policy, steps=8, num_batches=3, **kwargs)
    assert reason is None
    assert_same_frames(want, got)
    for batch in got:  # three whole episodes each, zero-padded along time
        mask = batch["collector", "mask"]
        assert batch.batch_size[0] == 3 and mask[:, 0].all()
        last = mask.sum(-1) - 1
        assert batch["next", "done"][torch.arange(3), last].all()


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_the_presets_workers_run_the_lean_loop(name):
    """Every preset's worker (env, policy, random frames, casts) takes the lean path."""
    for extra, module in (("halfcheetah", "mujoco"), ("pong", "envpool")):
        if extra in name and importlib.util.find_spec(module) is None:
            pytest.skip(f"{name} needs {module}, not installed")
    preset = get_preset(name).override({"num_envs": 2} if "pong" not in name else {})
    factories = preset.factories()
    learner = factories["learner_factory"](**factories["policy_factory"]())
    config = preset.scheme.collector_config(
        factories["env_factory"], learner.policy, offpolicy=True
    )
    spec = worker_specs(config)[0]
    rollout = WorkerCollector(
        spec.create_env_fn, spec.policy, frames_per_batch=spec.frames_per_batch,
        collector_class=spec.collector_class, collector_kwargs=spec.collector_kwargs,
    )  # fmt: skip
    try:
        assert rollout.fast_path() is True
    finally:
        rollout.shutdown()


@pytest.mark.parametrize("num_envs", [1, 8])
def test_truncation_and_observation_norm_match_torchrls(num_envs):
    """StepCounter(max_steps) truncates and resets; ObservationNorm both ways, after a cast."""
    torch.manual_seed(0)
    policy = mlp_policy(4, 2)
    cases = {
        "max_steps": [RewardSum(), StepCounter(max_steps=7)],
        "max_steps first": [StepCounter(max_steps=7), RewardScaling(loc=0.0, scale=2.0)],
        "norm": [
            ObservationNorm(loc=0.5, scale=2.0, in_keys=["observation"]),
            RewardSum(),
            StepCounter(),
        ],
        "standard normal": [
            ObservationNorm(
                loc=torch.tensor([0.1, 0.0, -0.1, 0.2]),
                scale=torch.tensor([2.0, 1.0, 0.5, 4.0]),
                in_keys=["observation"],
                standard_normal=True,
            ),
        ],
    }
    for name, transforms in cases.items():
        env_fn = functools.partial(
            lambda ts=transforms: episode_env("CartPole-v1", num_envs, *(t.clone() for t in ts))
        )
        want, _ = batches(Collector, env_fn, policy, steps=40)
        got, reason = batches(LeanCollector, env_fn, policy, steps=40)
        assert reason is None, name
        assert_same_frames(want, got)
        if name.startswith("max_steps"):
            truncated = got[0]["next", "truncated"]
            assert truncated.any() and (got[0]["next", "step_count"][truncated] == 7).all()


def test_other_envs_and_options_run_torchrls_rollout():
    policy = mlp_policy(3, 1, discrete=False)
    for transform, why in [
        (CatFrames(N=2, dim=-1, in_keys=["observation"], out_keys=["stacked"]), "CatFrames"),
        (ObservationNorm(loc=0.0, scale=2.0, in_keys=["observation"], out_keys=["normed"]),
         "ObservationNorm renames keys"),
    ]:  # fmt: skip
        transformed = functools.partial(
            lambda t=transform: TransformedEnv(make_env("Pendulum-v1"), t.clone())
        )
        want, _ = batches(Collector, transformed, policy, steps=10)
        got, reason = batches(LeanCollector, transformed, policy, steps=10)
        assert why in reason
        assert_same_frames(want, got)
    pendulum = functools.partial(make_env, "Pendulum-v1")
    _, reason = batches(LeanCollector, pendulum, policy, steps=10, postproc=lambda td: td)
    assert "postproc" in reason


def test_workers_default_to_lean_and_keep_a_users_collector_class():
    def worker_batch(**spec_kwargs):
        spec = WorkerSpec(
            functools.partial(make_env, "CartPole-v1", num_envs=4),
            mlp_policy(4, 2),
            frames_per_batch=80,
            **spec_kwargs,
        )
        worker = CollectorWorker(2, spec, seed=5)
        try:
            return type(worker._collector), TensorDictCodec().decode(worker.collect(0).payload)
        finally:
            worker.shutdown()

    torch.manual_seed(0)
    lean_class, lean = worker_batch()
    torch.manual_seed(0)
    user_class, torchrls = worker_batch(collector_class=Collector)
    assert lean_class is LeanCollector and user_class is Collector
    assert_same_frames([torchrls], [lean])  # stamped keys included


def test_built_by_hand_it_leaves_the_env_as_built_without_torchrls_future_warning(recwarn):
    """An nn.Module policy on an env without InitTracker: torchrl's Collector warns that 0.15
    will append one; a LeanCollector built by a user (the docs' example) keeps the env as built,
    as tdscheme's workers do, and says nothing; the caller's own choice still wins."""
    env = make_env("CartPole-v1", num_envs=2)
    policy = mlp_policy(4, 2)
    LeanCollector(env, policy, frames_per_batch=8).shutdown()
    assert not [w for w in recwarn if "auto_register_policy_transforms" in str(w.message)]
    Collector(make_env("CartPole-v1", num_envs=2), policy, frames_per_batch=8).shutdown()
    assert [w for w in recwarn if "auto_register_policy_transforms" in str(w.message)]  # control
