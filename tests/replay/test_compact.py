"""CompactFrameStorage gives back what torchrl's LazyTensorStorage gives, bit for bit, holding less.

Real torchrl collectors on gymnasium envs of random frames (frame stacking, truncation,
gymnasium's NEXT_STEP vector envs), real torchrl buffers, samplers and checkpoints.
"""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest
import ray
import torch
from tensordict import TensorDict
from torchrl.collectors import Collector
from torchrl.data import (
    LazyTensorStorage,
    SamplerWithoutReplacement,
    SliceSampler,
    TensorDictReplayBuffer,
)
from torchrl.data.replay_buffers.ray_buffer import RayReplayBuffer
from torchrl.envs import CatFrames, Compose, GymWrapper, RewardSum, StepCounter, TransformedEnv
from torchrl.envs.utils import RandomPolicy

from tdscheme import RayCollector, Scheme
from tdscheme.envs import make_atari_env, wrap_gym_env
from tdscheme.presets import get_preset
from tdscheme.replay import CompactFrameStorage
from tdscheme.replay.ray_held import buffer_actor


class RandomFrames(gym.Wrapper):
    """CartPole's dynamics with random uint8 frames for observations (no two alike)."""

    def __init__(self, env, shape=(1, 12, 12), seed=0):
        super().__init__(env)
        self.observation_space = gym.spaces.Box(0, 255, shape=shape, dtype=np.uint8)
        self._rng = np.random.default_rng(seed)

    def _frame(self):
        return self._rng.integers(0, 256, self.observation_space.shape, dtype=np.uint8)

    def reset(self, **kwargs):
        _, info = self.env.reset(**kwargs)
        return self._frame(), info

    def step(self, action):
        _, reward, terminated, truncated, info = self.env.step(action)
        return self._frame(), reward, terminated, truncated, info


def stacked_env(frames=4, max_steps=9):
    """Frames stacked by torchrl's CatFrames; episodes cut by StepCounter (truncation)."""
    env = GymWrapper(RandomFrames(gym.make("CartPole-v1")))
    return TransformedEnv(
        env,
        Compose(
            CatFrames(N=frames, dim=-3, in_keys=["observation"]),
            StepCounter(max_steps=max_steps),
            RewardSum(),
        ),
    )


def vector_env(num_envs=3):
    """gymnasium's default vector env (NEXT_STEP autoreset) of random frames, no stacking."""
    vec = gym.vector.SyncVectorEnv(
        [
            lambda i=i: RandomFrames(gym.make("CartPole-v1"), (2, 16, 16), seed=i)
            for i in range(num_envs)
        ]
    )
    return wrap_gym_env(vec)


def batches(make_env, *, frames_per_batch, total, seed=0):
    env = make_env()
    env.set_seed(seed)
    collector = Collector(
        env, RandomPolicy(env.action_spec), frames_per_batch=frames_per_batch, total_frames=total
    )
    try:
        yield from (batch.clone() for batch in collector)
    finally:
        collector.shutdown()


def assert_same(a, b):
    assert set(a.keys(True, True)) == set(b.keys(True, True))
    for key in a.keys(True, True):
        x, y = a.get(key), b.get(key)
        assert x.dtype == y.dtype and x.shape == y.shape, key
        assert torch.equal(x, y), key


def pair(size, sampler=None, **kwargs):
    ref = TensorDictReplayBuffer(
        storage=LazyTensorStorage(size), sampler=sampler and sampler(), batch_size=16
    )
    cmp = TensorDictReplayBuffer(
        storage=CompactFrameStorage(size, **kwargs), sampler=sampler and sampler(), batch_size=16
    )
    return ref, cmp


@pytest.mark.parametrize("size", [64, 97])
def test_stacked_frames_come_back_bit_for_bit_through_wraps_episode_ends_and_truncation(size):
    ref, cmp = pair(size, keys=["observation"], stack_dim=-3)
    for batch in batches(stacked_env, frames_per_batch=23, total=23 * 12):
        assert batch["next", "truncated"].any() or batch["next", "done"].any()
        ref.extend(batch.reshape(-1))
        cmp.extend(batch.reshape(-1))
        assert_same(ref[:], cmp[:])
    assert len(cmp) == len(ref) == size
    stats = cmp.storage.pool_sizes()["observation"]
    assert 0 < stats["head"] < size / 2 and 0 < stats["final"] < size / 2


def test_gymnasium_next_step_vector_env_batches_come_back_bit_for_bit():
    ref, cmp = pair(150, keys=["observation"])
    for batch in batches(vector_env, frames_per_batch=60, total=600):
        assert batch.ndim == 2  # [envs, time]
        ref.extend(batch.reshape(-1))
        cmp.extend(batch.reshape(-1))
        assert_same(ref[:], cmp[:])


def test_it_holds_each_plane_about_once():
    ref, cmp = pair(200, keys=["observation"], stack_dim=-3)
    for batch in batches(lambda: stacked_env(max_steps=50), frames_per_batch=100, total=400):
        ref.extend(batch.reshape(-1))
        cmp.extend(batch.reshape(-1))
    pools = cmp.storage.pool_sizes()["observation"]
    planes = 200 + 3 * pools["head"] + 4 * pools["final"]  # a plane per slot, the stacks aside
    assert planes < 200 * 1.5  # torchrl's storage: 8 per slot (obs and next obs, 4 planes each)
    assert ref.storage._storage.get("observation").shape == (200, 4, 12, 12)
    assert cmp.storage.nbytes() < ref.storage._storage.bytes() / 2.5


@pytest.mark.parametrize("sampler", [None, SamplerWithoutReplacement])
def test_samplers_draw_the_same_transitions(sampler):
    ref, cmp = pair(120, sampler=sampler, keys=["observation"], stack_dim=-3)
    for batch in batches(stacked_env, frames_per_batch=40, total=200):
        ref.extend(batch.reshape(-1))
        cmp.extend(batch.reshape(-1))
    for seed in range(3):
        torch.manual_seed(seed)
        a = ref.sample()
        torch.manual_seed(seed)
        b = cmp.sample()
        assert_same(a, b)


def test_slice_sampler_draws_the_same_trajectory_slices():
    ref = TensorDictReplayBuffer(
        storage=LazyTensorStorage(100),
        sampler=SliceSampler(slice_len=4, end_key=("next", "done")),
        batch_size=16,
    )
    cmp = TensorDictReplayBuffer(
        storage=CompactFrameStorage(100, stack_dim=-3, min_bytes=64),
        sampler=SliceSampler(slice_len=4, end_key=("next", "done")),
        batch_size=16,
    )
    for batch in batches(stacked_env, frames_per_batch=50, total=100):
        ref.extend(batch.reshape(-1))
        cmp.extend(batch.reshape(-1))
    assert cmp.storage.frame_keys == [("observation",)]  # chosen by size (4 x 12 x 12 >= 64 bytes)
    torch.manual_seed(1)
    a = ref.sample()
    torch.manual_seed(1)
    assert_same(a, cmp.sample())


def test_writes_at_any_slots_hand_values_over_before_overwriting():
    """Slots written out of order (torchrl's ``rb[idx] = ...``): neighbours keep their values."""
    ref, cmp = pair(80, keys=["observation"], stack_dim=-3)
    data = torch.cat([b.reshape(-1) for b in batches(stacked_env, frames_per_batch=40, total=200)])
    ref.extend(data[:80])
    cmp.extend(data[:80])
    gen = torch.Generator().manual_seed(0)
    for start in range(80, 200, 7):
        slots = torch.randperm(80, generator=gen)[:5]
        slots = torch.cat([slots, (slots[:2] + 1) % 80]).unique()
        chunk = data[start : start + slots.numel()]
        slots = slots[: chunk.shape[0]]
        ref.storage.set(slots, chunk, set_cursor=False)
        cmp.storage.set(slots, chunk, set_cursor=False)
        assert_same(ref[:], cmp[:])


def test_state_dict_and_dumps_round_trip(tmp_path):
    _, cmp = pair(60, keys=["observation"], stack_dim=-3)
    for batch in batches(stacked_env, frames_per_batch=25, total=100):
        cmp.extend(batch.reshape(-1))
    before = cmp[:]
    _, other = pair(60, keys=["observation"], stack_dim=-3)
    other.load_state_dict(cmp.state_dict())
    assert_same(before, other[:])
    cmp.dumps(tmp_path / "rb")
    _, loaded = pair(60, keys=["observation"], stack_dim=-3)
    loaded.loads(tmp_path / "rb")
    assert_same(before, loaded[:])
    extra = next(batches(stacked_env, frames_per_batch=25, total=25, seed=5)).reshape(-1)
    for rb in (cmp, loaded):  # the pools came back too: later writes hand over alike
        rb.extend(extra)
    assert_same(cmp[:], loaded[:])
    cmp.empty()
    assert len(cmp) == 0 and cmp.storage.pool_sizes() == {}


def test_single_adds_and_float_bits():
    """``add`` (one transition) and float observations: ``-0.0`` and NaN keep their bits."""
    ref, cmp = pair(10, keys=["obs"])
    obs = (
        torch.tensor([[0.0, 1.0], [-0.0, 2.0], [float("nan"), 3.0], [4.0, 5.0]])
        .expand(4, 2)
        .clone()
    )
    obs = obs.repeat(1, 300)  # 2,400 bytes per step
    for t in range(3):
        step = TensorDict({"obs": obs[t], "next": {"obs": obs[t + 1]}}, [])
        ref.add(step)
        cmp.add(step)
    steps = TensorDict({"obs": obs[:-1], "next": {"obs": obs[1:]}}, [3])
    ref.extend(steps)
    cmp.extend(steps)
    a, b = ref[:], cmp[:]
    assert torch.equal(a["obs"].view(torch.int32), b["obs"].view(torch.int32))
    assert torch.equal(a["next", "obs"].view(torch.int32), b["next", "obs"].view(torch.int32))


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match=r"stack_dim=0: expected None or a negative int"):
        CompactFrameStorage(10, stack_dim=0)
    with pytest.raises(ValueError, match=r"max_size=0: expected an int >= 1"):
        CompactFrameStorage(0)
    with pytest.raises(ValueError, match=r"keys='pixels'"):
        CompactFrameStorage(10, keys="pixels")
    step = TensorDict(
        {"pixels": torch.zeros(4, 8, 8, 8), "next": {"pixels": torch.zeros(4, 8, 8, 8)}}, [4]
    )
    rb = TensorDictReplayBuffer(storage=CompactFrameStorage(10, keys=["obs"]), batch_size=2)
    with pytest.raises(ValueError, match=r"the data has no 'obs'"):
        rb.extend(step)
    rb = TensorDictReplayBuffer(storage=CompactFrameStorage(10, stack_dim=-4), batch_size=2)
    with pytest.raises(
        ValueError, match=r"stack_dim=-4: \('pixels',\) has per-step shape \[8, 8, 8\]"
    ):
        rb.extend(step)
    rb = TensorDictReplayBuffer(storage=CompactFrameStorage(10), batch_size=2)
    with pytest.raises(
        ValueError, match=r"extend a \[num_envs, time\] batch as batch.reshape\(-1\)"
    ):
        rb.extend(step.reshape(2, 2))
    with pytest.raises(ValueError, match=r"a slot written twice in one write"):
        rb.storage.set(torch.tensor([1, 2, 1, 3]), step)


def test_a_write_past_the_capacity_keeps_its_last_transitions():
    """75 transitions into 30 slots: the last 30, in the slots the writer gave them."""
    _, cmp = pair(30, keys=["observation"], stack_dim=-3)
    data = next(batches(stacked_env, frames_per_batch=75, total=75))
    cmp.extend(data)
    assert_same(torch.cat([data[60:], data[45:60]]).exclude("index"), cmp[:].exclude("index"))


class MirroredCompactStorage(CompactFrameStorage):
    """Writes each transition also into torchrl's LazyTensorStorage, for the test to compare."""

    def __init__(self, max_size, **kwargs):
        super().__init__(max_size, **kwargs)
        self.mirror = LazyTensorStorage(max_size)

    def set(self, cursor, data, *, set_cursor=True):
        super().set(cursor, data, set_cursor=set_cursor)
        self.mirror.set(cursor, data, set_cursor=set_cursor)


def _both(buffer):
    """Runs in the buffer's actor: what the compact storage and its mirror give back."""
    return buffer._storage.get(slice(None)), buffer._storage.mirror.get(slice(None))


@pytest.mark.parametrize(
    "env_fn",
    [stacked_env, functools.partial(make_atari_env, "ALE/Pong-v5", num_envs=2, backend="envpool")],
    ids=["stacked-truncated", "envpool-pong-x2"],
)
def test_workers_write_into_a_ray_held_compact_buffer(ray_clean, by_value, env_fn):
    """tdscheme's workers write their [envs, time] batches; the buffer gives torchrl's layout back."""
    rb = RayReplayBuffer(
        storage=functools.partial(MirroredCompactStorage, 300, stack_dim=-3),
        batch_size=8, remote_config={"num_cpus": 0},
    )  # fmt: skip
    try:
        env = env_fn()
        policy = RandomPolicy(env.action_spec)
        env.close()
        with RayCollector(
            env_fn, policy, frames_per_batch=64, total_frames=640, num_collectors=2,
            replay_buffer=rb, remote_configs={"num_cpus": 0.5},
        ) as collector:  # fmt: skip
            assert all(batch is None for batch in collector)
        got, want = ray.get(buffer_actor(rb.client()).__ray_call__.remote(_both), timeout=60)
        assert len(got) == 300
        assert_same(want, got)
        assert want["observation"].shape[-3:] == (4, 84, 84) or want["next", "done"].any()
        sample = rb.sample()
        assert sample["observation"].shape[0] == 8
    finally:
        rb.shutdown()


@pytest.mark.timeout(300)
def test_an_off_policy_scheme_trains_from_a_driver_held_compact_buffer(ray_clean):
    """DQN on CartPole (the preset, tiny): the driver writes each batch; the storage keeps it exactly."""
    tiny = {"num_collectors": 1, "num_envs": 2, "frames_per_batch": 128, "init_random_frames": 128,
            "utd_ratio": 0.25, "batch_size": 32, "hidden_sizes": (16, 16),
            "collector_resources": {"num_cpus": 0.5}}  # fmt: skip
    preset = get_preset("dqn-cartpole").override(tiny)
    storage = MirroredCompactStorage(300, keys=["observation"])
    factories = {
        **preset.factories(),
        "storage_factory": functools.partial(
            TensorDictReplayBuffer, storage=storage, batch_size=32
        ),
    }
    with Scheme(**factories, config=preset.scheme) as scheme:
        while scheme.frames < 512:
            metrics = scheme.step()
        assert metrics["replay/updates"] == (scheme.frames - 128) * 0.25
        buffer = scheme.replay_buffer
        assert buffer.storage is storage and len(buffer) == 300
        assert_same(storage.mirror.get(slice(None)), storage.get(slice(None)))
        assert storage.pool_sizes()["observation"]["final"] > 0  # episode ends and batch ends
