"""make_atari_env: 4x84x84 uint8 Pong frames from EnvPool and from ale-py, with episode records."""

from __future__ import annotations

import functools
from importlib.util import find_spec

import pytest
import torch
from torchrl.data import Categorical

from tdscheme.envs import make_atari_env, make_env
from tdscheme.rollout.lean import LeanCollector
from tdscheme.rollout.torchrl_names import Collector
from tdscheme.testing import seed_collector
from tdscheme.transport import TensorDictCodec
from tests.rollout.test_lean import assert_same_frames

HAS_ENVPOOL = find_spec("envpool") is not None
HAS_ALE = find_spec("ale_py") is not None and find_spec("cv2") is not None
ENVPOOL = pytest.param(
    "envpool",
    marks=pytest.mark.skipif(not HAS_ENVPOOL, reason="EnvPool is missing (tdscheme[envpool])"),
)
GYMNASIUM = pytest.param(
    "gymnasium",
    marks=pytest.mark.skipif(not HAS_ALE, reason="ale-py or OpenCV is missing (tdscheme[atari])"),
)
BACKENDS = [ENVPOOL, GYMNASIUM]
PONG = "ALE/Pong-v5"


def rollout(backend, steps, *, num_envs=2, seed=0, **kwargs):
    """``steps`` random steps of ``num_envs`` Pong copies (torchrl's rollout, seeded)."""
    env = make_atari_env(PONG, num_envs=num_envs, backend=backend, **kwargs)
    try:
        env.set_seed(seed)
        torch.manual_seed(seed)
        return env.rollout(steps, break_when_any_done=False)
    finally:
        env.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_frames_are_stacked_grey_uint8_with_the_gymnasium_backends_shapes(backend):
    env = make_atari_env(PONG, num_envs=3, backend=backend)
    try:
        assert env.batch_size == (3,)
        assert env.observation_spec["observation"].shape == (3, 4, 84, 84)
        assert env.observation_spec["observation"].dtype == torch.uint8
        assert isinstance(env.action_spec, Categorical) and env.action_spec.space.n == 6
    finally:
        env.close()
    td = rollout(backend, 40, num_envs=3)
    obs = td["next", "observation"]
    assert obs.shape == (3, 40, 4, 84, 84) and obs.dtype == torch.uint8
    assert td["action"].shape == (3, 40) and td["action"].dtype == torch.int64
    assert td["next", "reward"].shape == (3, 40, 1) and td["next", "reward"].dtype == torch.float32
    for key in ("done", "terminated", "truncated"):
        assert td["next", key].shape == (3, 40, 1) and td["next", key].dtype == torch.bool
    assert td["next", "episode_reward"].shape == (3, 40, 1)
    assert td["next", "step_count"][:, -1].flatten().tolist() == [40, 40, 40]


@pytest.mark.parametrize("backend", BACKENDS)
def test_frames_are_real_pong_screens(backend):
    """Not a constant or a strided copy of one value (EnvPool 0.8.4 under NumPy 2)."""
    obs = rollout(backend, 30, num_envs=2)["next", "observation"]
    newest = obs[:, :, -1]  # [env, step, 84, 84]: each step's newest frame
    moved = (newest[:, 1:] != newest[:, :-1]).flatten(2).any(-1)
    assert moved.float().mean() > 0.8  # the screen changes at most steps (not between points)
    assert (newest[0] != newest[1]).any()  # the copies play their own games
    # Pong's grey: a brown field (87), white walls and ball (236), the paddles in between
    assert newest.unique().numel() > 10 and newest.min() >= 40 and newest.max() <= 240
    assert (newest == 87).float().mean() > 0.5
    # the stack shifts by one frame per step
    assert torch.equal(obs[:, 1:, :3], obs[:, :-1, 1:])


@pytest.mark.skipif(not (HAS_ENVPOOL and HAS_ALE), reason="needs EnvPool, ale-py and OpenCV")
def test_both_backends_give_the_same_frames_for_the_same_actions():
    """One no-op per reset (noop_max=1): EnvPool's C++ and gymnasium's wrappers, bit for bit."""
    actions = torch.tensor([0, 2, 2, 3, 1, 0, 2, 3, 3, 2, 2, 2]).expand(2, -1)
    frames = []
    for backend in ("envpool", "gymnasium"):
        env = make_atari_env(PONG, num_envs=2, backend=backend, noop_max=1)
        try:
            env.set_seed(0)
            td = env.reset()
            steps = [td["observation"]]
            for action in actions.unbind(-1):
                td = env.step(td.set("action", action))["next"]
                steps.append(td["observation"])
        finally:
            env.close()
        frames.append(torch.stack(steps, 1))
    assert torch.equal(frames[0], frames[1])


def test_one_env_has_make_envs_batch_sizes():
    """gymnasium: ``[]`` for one env (as make_env's GymEnv); EnvPool: always ``[num_envs]``."""
    if HAS_ALE:
        env = make_atari_env(PONG, backend="gymnasium")
        assert env.batch_size == () and env.rollout(2)["next", "reward"].shape == (2, 1)
        env.close()
    if HAS_ENVPOOL:
        env, cartpole = (
            make_atari_env(PONG, backend="envpool"),
            make_env("CartPole-v1", backend="envpool"),
        )
        assert env.batch_size == (1,) == cartpole.batch_size
        env.close()
        cartpole.close()


@pytest.mark.skipif(not HAS_ALE, reason="ale-py or OpenCV is missing (tdscheme[atari])")
def test_ale_py_prints_no_banner(capfd):
    """ale-py's "A.L.E: ... [Powered by Stella]" at every env would cover the progress line."""
    env = make_atari_env(PONG, num_envs=2, backend="gymnasium")
    env.rollout(2)
    env.close()
    out, err = capfd.readouterr()
    assert "Stella" not in out + err and "A.L.E" not in out + err


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_episode_records_the_games_score(backend):
    env = make_atari_env(PONG, backend=backend)
    try:
        env.set_seed(1)
        torch.manual_seed(1)
        td = env.rollout(5_000)  # random actions, to the first episode's end (~1,000 steps)
    finally:
        env.close()
    done = td["next", "done"].reshape(-1)
    assert done[-1] and not done[:-1].any(), "Pong's random episode did not end in 5,000 steps"
    score = td["next", "episode_reward"].reshape(-1)[-1]
    assert score == td["next", "reward"].sum() and -21 <= score < 0
    assert td["next", "step_count"].reshape(-1)[-1] == done.numel()
    assert td["next", "terminated"].reshape(-1)[-1] and not td["next", "truncated"].any()


@pytest.mark.parametrize("backend", BACKENDS)
def test_clipped_rewards_leave_the_score_raw(backend):
    """Space Invaders scores 5 to 30 a hit: the learner's reward is clipped, the score is not."""
    tds = {}
    for clip in (True, False):
        env = make_atari_env("SpaceInvaders-v5", backend=backend, clip_rewards=clip)
        try:
            env.set_seed(0)
            torch.manual_seed(0)
            tds[clip] = env.rollout(150, break_when_any_done=False)
        finally:
            env.close()
    clipped, raw = tds[True], tds[False]
    assert raw["next", "reward"].max() >= 5 and set(
        clipped["next", "reward"].unique().tolist()
    ) <= {
        0.0,
        1.0,
    }
    assert torch.equal(clipped["next", "episode_reward"], raw["next", "episode_reward"])
    assert torch.equal(clipped["next", "reward"], raw["next", "reward"].clamp(-1, 1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_lean_frames_equal_torchrls_and_round_trip_the_codec(backend):
    """LeanCollector steps both backends on its lean path (RewardClipping included)."""
    env_fn = functools.partial(make_atari_env, PONG, num_envs=2, backend=backend)
    runs = []
    for cls in (Collector, LeanCollector):
        torch.manual_seed(0)
        collector = cls(
            env_fn(), None, frames_per_batch=2 * 16, auto_register_policy_transforms=False
        )
        try:
            seed_collector(collector, 0)
            it = iter(collector)
            runs.append(([next(it), next(it)], getattr(collector, "lean_reason", "torchrl")))
        finally:
            collector.shutdown()
    (want, _), (got, reason) = runs
    assert reason is None
    assert_same_frames(want, got)
    codec = TensorDictCodec()
    payload = codec.encode(got[0])
    back = codec.decode(payload)
    assert back["next", "observation"].dtype == torch.uint8
    assert torch.equal(back["observation"], got[0]["observation"])
    assert (back == got[0]).all()
    assert payload.nbytes < 2 * 2 * 16 * 4 * 84 * 84 * 1.1  # two uint8 frame stacks a step


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"env_id": "CartPole-v1"}, "env_id='CartPole-v1' is invalid; accepted: an Atari id"),
        ({"backend": "dm"}, "backend='dm' is invalid; accepted: 'envpool', 'gymnasium'"),
        ({"num_envs": 0}, "num_envs=0 is invalid; accepted: an int >= 1"),
        ({"noop_max": 0}, "noop_max=0 is invalid; accepted: an int >= 1"),
        ({"clip_rewards": 1}, "clip_rewards=1 is invalid"),
        ({"repeat_action_probability": 1.5}, "repeat_action_probability=1.5 is invalid"),
    ],
)
def test_invalid_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")):
        make_atari_env(**{"env_id": PONG, **kwargs})


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_unknown_game_names_the_closest(backend):
    with pytest.raises(ValueError, match="Pongg-v5.*is invalid.*did you mean.*Pong-v5"):
        make_atari_env("ALE/Pongg-v5", backend=backend)
