"""gymnasium's default vector env (NEXT_STEP autoreset) runs, without its reset steps."""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest
import torch
from torchrl.envs import GymWrapper

from tdscheme import RayCollector
from tdscheme.envs import wrap_gym_env
from tdscheme.errors import WorkerError
from tdscheme.rollout.lean import LeanCollector
from tdscheme.rollout.torchrl_names import Collector
from tdscheme.testing import mlp_policy, seed_collector

MODES = gym.vector.AutoresetMode


def next_step_env(env_id: str, num_envs: int, **kwargs):
    """What a user writes first: ``gym.make_vec`` in its default mode (a SyncVectorEnv)."""
    env = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="sync", **kwargs)
    assert type(env) is gym.vector.SyncVectorEnv and env.autoreset_mode == MODES.NEXT_STEP
    return env


def disabled_env(env_id: str, num_envs: int, **kwargs):
    return GymWrapper(
        gym.make_vec(
            env_id, num_envs=num_envs, vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": MODES.DISABLED}, **kwargs,
        )
    )  # fmt: skip


def batches(cls, env_fn, policy, *, steps=40, num_batches=2, seed=0):
    torch.manual_seed(seed)
    env = env_fn()
    collector = cls(
        env, policy, frames_per_batch=steps * env.batch_size.numel(),
        auto_register_policy_transforms=False,
    )  # fmt: skip
    try:
        seed_collector(collector, seed)
        it = iter(collector)
        return [next(it) for _ in range(num_batches)], getattr(collector, "lean_reason", None)
    finally:
        collector.shutdown()


@pytest.mark.parametrize(
    "env_id, kwargs, discrete",
    [("CartPole-v1", {}, True), ("Pendulum-v1", {"max_episode_steps": 30}, False)],
)
def test_next_step_batches_are_a_disabled_envs_frame_for_frame(env_id, kwargs, discrete):
    """Same seeds: the lean rollout on the NEXT_STEP env = torchrl's Collector on a DISABLED one."""
    obs_dim, act_dim = (4, 2) if discrete else (3, 1)
    torch.manual_seed(0)
    policy = mlp_policy(obs_dim, act_dim, discrete=discrete)
    want, _ = batches(Collector, functools.partial(disabled_env, env_id, 4, **kwargs), policy)
    user_env = functools.partial(lambda: wrap_gym_env(next_step_env(env_id, 4, **kwargs)))
    got, reason = batches(LeanCollector, user_env, policy)
    assert reason is None  # the lean rollout ran
    for w, g in zip(want, got, strict=True):
        assert g.batch_size == w.batch_size == torch.Size([4, 40])  # transitions only
        assert sorted(g.keys(True, True), key=str) == sorted(w.keys(True, True), key=str)
        for key in w.keys(True, True):
            assert torch.equal(g[key], w[key]), key
    done = torch.cat([b["next", "done"] for b in got], 1)
    assert done.any() and not done.all()  # episodes ended inside the batches


def test_the_transitions_are_gymnasiums_less_its_reset_steps():
    """Replayed on the same NEXT_STEP env stepped by gymnasium: every transition, no reset step."""
    env = wrap_gym_env(next_step_env("CartPole-v1", 3))
    raw = next_step_env("CartPole-v1", 3)
    rng = np.random.default_rng(0)
    env._env.reset(seed=7)
    raw.reset(seed=7)
    td = env.reset()  # torchrl resets once more (seed None): so does gymnasium's
    obs, _ = raw.reset()
    assert np.array_equal(td["observation"].numpy(), obs)
    ours = [[] for _ in range(3)]  # per copy: (obs, action, reward, next obs, terminated)
    for _ in range(120):
        action = rng.integers(0, 2, size=3)
        td["action"] = torch.nn.functional.one_hot(torch.as_tensor(action), 2)
        out, td = env.step_and_maybe_reset(td)
        for i in range(3):
            ours[i].append((out["observation"][i].numpy(), action[i], out["next", "reward"][i].item(),
                            out["next", "observation"][i].numpy(), out["next", "terminated"][i].item()))  # fmt: skip
    # gymnasium's own NEXT_STEP loop, fed each copy's actions in order; a copy's reset step
    # takes no action of its own (ignored) and yields no transition
    theirs, cursor, waiting = [[] for _ in range(3)], [0] * 3, np.zeros(3, dtype=bool)
    while min(cursor) < 120:
        action = np.array([ours[i][min(cursor[i], 119)][1] for i in range(3)])
        nxt, reward, terminated, truncated, _ = raw.step(action)
        for i in range(3):
            if not waiting[i] and cursor[i] < 120:
                theirs[i].append((obs[i].copy(), action[i], float(reward[i]), nxt[i].copy(), bool(terminated[i])))  # fmt: skip
                cursor[i] += 1
        waiting = terminated | truncated
        obs = nxt
    resets = 0
    for i in range(3):
        for mine, gyms in zip(ours[i], theirs[i], strict=True):
            assert np.array_equal(mine[0], gyms[0]) and np.array_equal(mine[3], gyms[3])
            assert mine[1:3] == gyms[1:3] and mine[4] == gyms[4]
            resets += mine[4]
    assert resets > 3  # episodes ended (and their reset steps were skipped)
    env.close()
    raw.close()


def test_a_vector_env_that_steps_its_copies_at_once_is_refused_with_the_way_that_runs():
    native = gym.make_vec("CartPole-v1", num_envs=2)  # CartPoleVectorEnv, NEXT_STEP
    with pytest.raises(ValueError) as err:
        wrap_gym_env(native)
    message = str(err.value)
    assert "env=CartPoleVectorEnv" in message and "NEXT_STEP" in message
    assert "gym.make_vec('CartPole-v1', num_envs, vectorization_mode='sync')" in message
    native.close()
    with pytest.raises(TypeError, match="env=3 is not a gymnasium env; accepted"):
        wrap_gym_env(3)


def test_other_modes_and_single_envs_are_wrapped_as_they_are():
    single = wrap_gym_env(gym.make("Pendulum-v1"))
    assert single.batch_size == torch.Size([])
    same_step = gym.make_vec(
        "Acrobot-v1", num_envs=2, vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": MODES.SAME_STEP},
    )  # fmt: skip
    assert wrap_gym_env(same_step)._env.autoreset_mode == MODES.SAME_STEP
    for env in (single, same_step):
        env.close()


def test_a_collectors_factory_may_return_gymnasiums_default_vector_env(ray_clean):
    """``create_env_fn`` returns ``gym.make_vec(id, n)``: the workers wrap it, on the fast path."""

    def acrobot_default():  # local: Ray ships it by value
        return gym.make_vec("Acrobot-v1", num_envs=4)

    with RayCollector(
        acrobot_default, mlp_policy(6, 3), frames_per_batch=64, total_frames=256,
        num_collectors=2, remote_configs={"num_cpus": 0.5},
    ) as collector:  # fmt: skip
        frames = [batch.numel() for batch in collector]
        assert collector.stats()["fast_path"] == [True, True]
    assert sum(frames) == 256


def test_a_refused_vector_env_reaches_the_user_with_the_way_that_runs(ray_clean):
    def native_cartpole():
        return gym.make_vec("CartPole-v1", num_envs=4)

    with pytest.raises(WorkerError, match="vectorization_mode='sync'"):
        with RayCollector(
            native_cartpole, mlp_policy(4, 2), frames_per_batch=64, total_frames=128,
            num_collectors=1, remote_configs={"num_cpus": 0.5},
        ) as collector:  # fmt: skip
            list(collector)
