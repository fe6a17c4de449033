"""gymnasium's default vector env (NEXT_STEP autoreset) runs, without its reset steps."""

from __future__ import annotations

import copy
import functools

import gymnasium as gym
import numpy as np
import pytest
import torch
from torchrl.envs import (
    Compose,
    GymWrapper,
    ObservationNorm,
    RewardSum,
    StepCounter,
    TransformedEnv,
)

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


def one_call_env(num_envs: int, mode=MODES.NEXT_STEP):
    """Copies stepped in one call: an ``AsyncVectorEnv`` (each copy seeded, so modes compare)."""
    return gym.make_vec(
        "CartPole-v1", num_envs=num_envs, vectorization_mode="async",
        vector_kwargs={"autoreset_mode": mode},
    )  # fmt: skip


def valid_rows(batches, key):
    """Per env copy: its transitions' ``key`` across the batches, padding left out."""
    rows = []
    for i in range(batches[0].batch_size[0]):
        masks = [b.get(("collector", "mask"), None) for b in batches]
        parts = [
            b[key][i] if m is None else b[key][i][m[i]] for b, m in zip(batches, masks, strict=True)
        ]
        rows.append(torch.cat(parts, 0))
    return rows


TRANSFORMS = {
    "bare": list,
    "step-count-and-return": lambda: [StepCounter(), RewardSum()],
    # the reset observations are the step's own, normalized once (no reset call)
    "normalized": lambda: [ObservationNorm(loc=0.5, scale=2.0, in_keys=["observation"])],
}


@pytest.mark.parametrize("transforms", list(TRANSFORMS))
def test_a_one_call_next_step_env_gives_a_disabled_envs_transitions_each_row_padded_at_its_end(
    transforms,
):
    """AsyncVectorEnv, NEXT_STEP: per copy, the transitions of the same env built DISABLED
    (with StepCounter and RewardSum: a reset step neither counts nor adds)."""
    torch.manual_seed(0)
    policy = mlp_policy(4, 2, discrete=True)

    def torchrl_env(env):
        made = TRANSFORMS[transforms]()
        return TransformedEnv(env, Compose(*made)) if made else env

    want, _ = batches(Collector, lambda: torchrl_env(GymWrapper(one_call_env(3, MODES.DISABLED))),
                      policy, steps=30, num_batches=3)  # fmt: skip
    got, reason = batches(LeanCollector, lambda: torchrl_env(wrap_gym_env(one_call_env(3))),
                          policy, steps=30, num_batches=3)  # fmt: skip
    assert reason is None
    resets = 0
    for batch in got:
        assert batch.batch_size == torch.Size([3, 30])  # env calls x copies
        mask = batch["collector", "mask"]
        count = mask.sum(1)
        # each row: its transitions first, then padding, zeroed, one frame per reset step
        assert torch.equal(mask, torch.arange(30) < count.unsqueeze(1))
        for key in batch.keys(True, True):  # every leaf's padding, whichever way it was packed
            assert key == ("collector", "mask") or not batch[key][~mask].any(), key
        assert batch["next", "reward"][mask].eq(1).all()  # CartPole: no reset step is kept
        resets += int((30 - count).sum())
    assert resets >= 3  # reset steps happened and were left out
    for key in want[0].keys(True, True):
        for mine, theirs in zip(valid_rows(got, key), valid_rows(want, key), strict=True):
            assert torch.equal(mine, theirs[: len(mine)]), key


def test_cartpoles_own_vector_env_rows_are_its_calls_less_its_reset_steps():
    """``gym.make_vec("CartPole-v1", n)`` (CartPoleVectorEnv): replayed call by call on a copy."""
    torch.manual_seed(0)
    env = wrap_gym_env(gym.make_vec("CartPole-v1", num_envs=4))
    collector = LeanCollector(env, mlp_policy(4, 2, discrete=True), frames_per_batch=4 * 40,
                              auto_register_policy_transforms=False)  # fmt: skip
    try:
        seed_collector(collector, 3)
        raw = copy.deepcopy(env._env.env)  # the same state and random generator
        it = iter(collector)
        got = [next(it) for _ in range(3)]
    finally:
        collector.shutdown()
    actions = [row.argmax(-1) for row in valid_rows(got, "action")]
    obs = [valid_rows(got, key) for key in ("observation", ("next", "observation"))]
    rewards, terms = valid_rows(got, ("next", "reward")), valid_rows(got, ("next", "terminated"))
    state = raw.state.T.astype(np.float32)
    cursor, waiting, kept = [0] * 4, np.zeros(4, dtype=bool), 0
    while min(cursor) < len(min(actions, key=len)):
        action = np.array([int(actions[i][min(cursor[i], len(actions[i]) - 1)]) for i in range(4)])
        nxt, reward, terminated, truncated, _ = raw.step(action)
        for i in np.flatnonzero(~waiting):
            if cursor[i] < len(actions[i]):
                c = cursor[i]
                assert np.array_equal(obs[0][i][c].numpy(), state[i])
                assert np.array_equal(obs[1][i][c].numpy(), nxt[i])
                assert rewards[i][c].item() == reward[i] == 1.0
                assert terms[i][c].item() == terminated[i]
                cursor[i], kept = c + 1, kept + 1
        waiting, state = terminated | truncated, nxt
    assert kept == sum(len(a) for a in actions) and sum(t.sum() for t in terms) > 3


def test_a_one_call_next_step_env_is_refused_where_the_lean_rollout_cannot_step_it():
    policy = mlp_policy(4, 2, discrete=True)
    with pytest.raises(ValueError, match="env=CartPoleVectorEnv .* lean rollout does not run: "
                       "the collector uses postproc"):  # fmt: skip
        LeanCollector(wrap_gym_env(gym.make_vec("CartPole-v1", 2)), policy, frames_per_batch=8,
                      postproc=lambda td: td)  # fmt: skip
    with pytest.raises(ValueError, match="trajs_per_batch is set"):
        LeanCollector(wrap_gym_env(gym.make_vec("CartPole-v1", 2)), policy, frames_per_batch=8,
                      trajs_per_batch=2)  # fmt: skip
    collector = Collector(wrap_gym_env(gym.make_vec("CartPole-v1", 2)), policy, frames_per_batch=8)
    with pytest.raises(RuntimeError, match="torchrl's rollout steps it; accepted: tdscheme's"):
        next(iter(collector))
    collector.shutdown()
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


def test_a_collectors_factory_may_return_cartpoles_own_vector_env(ray_clean):
    """``gym.make_vec("CartPole-v1", n)``: on the fast path; the budget counts transitions."""

    def native_cartpole():
        return gym.make_vec("CartPole-v1", num_envs=4)

    with RayCollector(
        native_cartpole, mlp_policy(4, 2, discrete=True), frames_per_batch=128, total_frames=1000,
        num_collectors=2, remote_configs={"num_cpus": 0.5},
    ) as collector:  # fmt: skip
        got = list(collector)
        stats = collector.stats()
    assert stats["fast_path"] == [True, True]
    transitions = sum(int(b["collector", "mask"].sum()) for b in got)
    assert transitions == stats["frames"] == 1000
    books = stats["ledger"]  # every env step booked: the reset steps in their own column
    assert books["balanced"] and books["reset_steps"] == stats["reset_steps"] > 0
    assert books["collected"] == books["yielded"] + books["discarded"] + books["reset_steps"]
    assert all(b["next", "reward"][b["collector", "mask"]].eq(1).all() for b in got)


def test_a_one_call_next_step_env_is_refused_for_a_ray_held_buffer(ray_replay_buffer):
    def native_cartpole():
        return gym.make_vec("CartPole-v1", num_envs=4)

    with pytest.raises(WorkerError, match="replay_buffer: the env is a one-call NEXT_STEP"):
        with RayCollector(
            native_cartpole, mlp_policy(4, 2, discrete=True), frames_per_batch=64,
            total_frames=128, num_collectors=1, replay_buffer=ray_replay_buffer,
            remote_configs={"num_cpus": 0.5},
        ) as collector:  # fmt: skip
            list(collector)


def torchrl_wrapped_default_vector_env(env_id="CartPole-v1"):
    """What a torchrl user writes for every gymnasium env: GymWrapper(gym.make_vec(...))."""
    return GymWrapper(gym.make_vec(env_id, num_envs=3))


@pytest.mark.parametrize(
    ("env_id", "torchrls_words"),
    [  # a SyncVectorEnv is refused by name; CartPole's own vector env has no mode to read
        ("Acrobot-v1", "The auto-reset mode must be one of SAME_STEP or DISABLED"),
        ("CartPole-v1", "has no attribute 'autoreset_mode'"),
    ],
)
def test_torchrls_wrapper_around_the_default_vector_env_names_the_ways_that_run(
    env_id, torchrls_words
):
    from tdscheme.envs.gym_vector import build_torchrl_env

    with pytest.raises(RuntimeError) as err:
        build_torchrl_env(functools.partial(torchrl_wrapped_default_vector_env, env_id))
    message = str(err.value)
    assert "NEXT_STEP autoreset mode (gymnasium's default) in torchrl's GymWrapper" in message
    assert "return the gymnasium env itself" in message and "wrap_gym_env" in message
    assert torchrls_words in message
    with pytest.raises(RuntimeError, match="^boom$"):  # any other error is the factory's own
        build_torchrl_env(lambda: (_ for _ in ()).throw(RuntimeError("boom")))


def test_a_worker_given_torchrls_wrapper_fails_at_its_start_naming_the_way(ray_clean, by_value):
    with pytest.raises(WorkerError, match="return the gymnasium env itself") as err:
        RayCollector(
            torchrl_wrapped_default_vector_env, mlp_policy(4, 2, discrete=True),
            frames_per_batch=64, total_frames=128, num_collectors=1,
            remote_configs={"num_cpus": 0.5},
        )  # fmt: skip
    first = str(err.value).splitlines()[0]  # then the remote traceback
    assert first.startswith("collector worker 0: failed while starting: RuntimeError: create_env_fn")
