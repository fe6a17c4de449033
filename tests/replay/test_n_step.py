"""n-step returns computed by each collector worker (tdscheme.replay.n_step): exact across batches, booked.

The in-process checks step real CartPole copies through torchrl's collector and hold the
frames NStepFrames hands out against n-step returns computed by hand over the whole
stream; the Ray checks run real workers writing into real Ray-held buffers.
"""

from __future__ import annotations

import functools

import pytest
import torch
from tensordict import TensorDict
from torchrl.collectors import Collector
from torchrl.data import LazyTensorStorage
from torchrl.data.replay_buffers.ray_buffer import RayReplayBuffer

from tdscheme import RayCollector
from tdscheme.presets import get_preset
from tdscheme.replay.n_step import NStep, NStepFrames
from tdscheme.replay.priorities import QLearningPriority
from tdscheme.replay.ray_held import ray_buffer_kwargs
from tdscheme.replay.sharded import ShardedReplayBuffer
from tdscheme.testing import make_env

GAMMA = 0.9


def by_hand(stream: TensorDict, n_steps: int, gamma: float) -> dict[str, torch.Tensor]:
    """n-step returns of a ``[envs, time]`` stream, frame by frame (the frames with ``n`` steps after them)."""
    envs, time = stream.batch_size
    done = stream["next", "done"].reshape(envs, time)
    terminated = stream["next", "terminated"].reshape(envs, time)
    reward = stream["next", "reward"].reshape(envs, time)
    out = {k: torch.zeros(envs, time - n_steps) for k in ("reward", "steps", "terminated", "obs")}
    out["obs"] = torch.zeros(envs, time - n_steps, stream["observation"].shape[-1])
    for e in range(envs):
        for t in range(time - n_steps):
            k, total = 0, 0.0
            while k < n_steps:
                total += gamma**k * float(reward[e, t + k])
                k += 1
                if done[e, t + k - 1]:
                    break
            out["reward"][e, t], out["steps"][e, t] = total, k
            out["terminated"][e, t] = float(terminated[e, t + k - 1])
            out["obs"][e, t] = stream["next", "observation"][e, t + k - 1]
    return out


@pytest.mark.parametrize("n_steps", [1, 3])
def test_returns_are_exact_across_batches_and_each_env_holds_n_steps(n_steps):
    """Four batches of 2 CartPole copies x 12 steps: what comes out equals the hand-computed returns."""
    env = make_env("CartPole-v1", num_envs=2)
    # the collector writes each batch into the same memory: the held steps must be copies
    collector = Collector(env, None, frames_per_batch=24, total_frames=96, return_same_td=True)
    collector.set_seed(0)
    n_step, batches, written = NStepFrames(NStep(n_steps=n_steps, gamma=GAMMA)), [], []
    for batch in collector:
        batches.append(batch.clone())
        written.append(n_step(batch).clone())
    collector.shutdown()
    stream, out = torch.cat(batches, -1), torch.cat(written, -1)
    held = 48 - out.batch_size[-1]
    assert held == (n_steps if n_steps > 1 else 0)  # per env, for good
    assert bool(stream["next", "done"].any())  # episodes end inside the windows checked
    expected = by_hand(stream, n_steps, GAMMA) if n_steps > 1 else None
    if expected is None:
        assert (out == stream).all()
        return
    torch.testing.assert_close(out["next", "reward"].reshape(2, -1), expected["reward"])
    torch.testing.assert_close(out["steps_to_next_obs"].reshape(2, -1).float(), expected["steps"])
    torch.testing.assert_close(out["next", "terminated"].reshape(2, -1).float(), expected["terminated"])
    torch.testing.assert_close(out["next", "observation"], expected["obs"])
    # the one-step reward and the episode ends stay the frame's own
    torch.testing.assert_close(out["next", "original_reward"], stream["next", "reward"][:, :-held])
    assert (out["next", "done"] == stream["next", "done"][:, :-held]).all()
    assert "gamma" not in out.keys() and "nonterminal" not in out.keys()


def test_a_window_ending_in_a_termination_does_not_bootstrap():
    """torchrl's transform leaves ``terminated`` at the frame's own step; here it is the window's last."""
    n_step = NStepFrames(NStep(n_steps=3, gamma=0.5))
    t = torch.arange(6.0).view(6, 1)
    end = t == 2  # the episode terminates at step 2
    out = n_step(TensorDict({"observation": t, "next": {
        "observation": t + 1, "reward": torch.ones(6, 1), "done": end, "terminated": end}}, [6]))
    assert out["next", "terminated"].flatten().tolist() == [True, True, True]
    assert out["next", "observation"].flatten().tolist() == [3.0, 3.0, 3.0]
    # the Q-learning priority does not bootstrap from the terminal observation either
    q = torch.nn.Identity()
    frames = out.clone()
    frames["action_value"], frames["action"] = torch.zeros(3, 1), torch.zeros(3, 1)
    frames["next", "observation"] = torch.full((3, 1), 100.0)  # a bootstrap would show
    policy = lambda td: td.set("action_value", q(td["observation"]))  # noqa: E731
    priority = QLearningPriority(gamma=0.5, observation_keys=["observation"])(frames, policy)
    assert priority.tolist() == [1.75, 1.5, 1.0]


def test_the_q_learning_priority_discounts_by_the_steps_to_the_next_observation():
    frames = TensorDict({
        "action_value": torch.zeros(2, 2), "action": torch.tensor([[1, 0], [1, 0]]),
        "steps_to_next_obs": torch.tensor([3, 1]),
        "next": {"observation": torch.ones(2, 1), "reward": torch.zeros(2, 1),
                 "terminated": torch.zeros(2, 1, dtype=torch.bool)}}, [2])  # fmt: skip
    policy = lambda td: td.set("action_value", torch.full((2, 2), 8.0))  # noqa: E731
    assert QLearningPriority(gamma=0.5)(frames, policy).tolist() == [1.0, 4.0]  # 8 * 0.5^k


@pytest.mark.parametrize(
    ("value", "why"),
    [({"n_steps": 0}, "n_steps=0"), ({"gamma": 0.0}, "gamma=0.0"), ({"gamma": 1.5}, "gamma=1.5")],
)
def test_bad_settings_are_named(value, why):
    with pytest.raises(ValueError, match=why):
        NStep(**value)


def test_the_collector_refuses_n_step_returns_it_cannot_write(ray_session):
    with pytest.raises(ValueError, match=r"replay_n_step=NStep\(n_steps=3.*replay_buffer=None"):
        RayCollector(functools.partial(make_env, "CartPole-v1"), frames_per_batch=64,
                     replay_n_step=NStep(3))  # fmt: skip


def test_workers_write_exact_returns_and_the_ledger_books_what_they_hold(ray_clean):
    """Two workers of 4 CartPole copies into a Ray-held buffer: every frame's return, the held steps booked."""
    buffer = RayReplayBuffer(
        storage=functools.partial(LazyTensorStorage, 10_000, ndim=2), batch_size=64,
        **ray_buffer_kwargs(),
    )  # fmt: skip
    try:
        with RayCollector(
            functools.partial(make_env, "CartPole-v1", num_envs=4), frames_per_batch=128,
            total_frames=1024, num_collectors=2, replay_buffer=buffer,
            replay_n_step=NStep(n_steps=3, gamma=GAMMA), remote_configs={"num_cpus": 0.5},
        ) as collector:  # fmt: skip
            for _ in collector:
                pass
            stats = collector.stats()
        held = 3 * 4 * 2  # n_steps x envs x workers, booked with each worker's first batch
        assert stats["frames_held_back"] == held
        # total_frames counts frames written: the workers step past it by what they hold
        assert stats["frames"] == len(buffer) == 1024
        ledger = stats["ledger"]
        assert ledger["balanced"] and ledger["held_back"] == held
        assert ledger["collected"] == 1024 + held + ledger["discarded"]
        data = buffer[: len(buffer)]
        steps = data["steps_to_next_obs"].double()
        assert set(steps.unique().tolist()) <= {1.0, 2.0, 3.0} and (steps == 3).float().mean() > 0.8
        # CartPole pays 1 a step: a k-step return is 1 + gamma + ... + gamma^(k-1)
        expected = (1 - GAMMA**steps) / (1 - GAMMA)
        torch.testing.assert_close(data["next", "reward"].double().reshape(steps.shape), expected)
        # a window cut short ends with its episode, a termination here (no episode of a
        # random policy reaches CartPole's 500-step limit): no bootstrap from it
        short = steps < 3
        assert short.any() and data["next", "terminated"].reshape(steps.shape)[short].all()
    finally:
        buffer.close()


def test_the_buffer_says_the_workers_n_step_and_priorities_follow_it(ray_clean):
    """Ape-X's shards: the collector takes the buffer's NStep; each priority discounts by gamma ** k."""
    from tests.replay.test_sharded import leaves, q_policy

    with ShardedReplayBuffer(num_shards=2, frames_per_shard=1000, batch_size=64, timeout_s=60,
                             priority_fn=QLearningPriority(GAMMA),
                             n_step=NStep(3, GAMMA)) as buffer:  # fmt: skip
        with RayCollector(
            functools.partial(make_env, "CartPole-v1"), q_policy(), frames_per_batch=100,
            total_frames=400, num_collectors=2, replay_buffer=buffer,
            remote_configs={"num_cpus": 0.5},
        ) as collector:  # fmt: skip
            for _ in collector:
                pass
            stats = collector.stats(workers="both")
        assert stats["frames_held_back"] == 3 * 2 and stats["ledger"]["balanced"]
        assert buffer.write_count == 400
        for k, shard in enumerate(buffer.shards):
            written = buffer.stats()["writes_per_shard"][k]
            data = shard[:written]
            assert (data["steps_to_next_obs"] == 3).any()
            expected = (QLearningPriority(GAMMA)(data, q_policy()).double() + 1e-8) ** 0.6
            torch.testing.assert_close(
                torch.from_numpy(leaves(shard, written).copy()), expected, rtol=1e-5, atol=0
            )


def test_apex_preset_writes_three_step_returns_and_a_driver_buffer_refuses_them():
    preset = get_preset("apex-dqn-cartpole")
    assert preset.algo.n_steps == 3 and preset.scheme.buffer_location == "ray"
    with pytest.raises(ValueError, match=r"n_steps=3 is invalid.*buffer_location='driver'"):
        get_preset("dqn-cartpole").derive("dqn-n-step", n_steps=3, buffer_location="driver")
