"""Videos: episodes rendered from real envs (CartPole, Pong through ale-py), written as mp4 and
decoded back; the driver's video thread (a Trainer's runs with videos: test_eval_workers.py,
and on W&B: test_logger_backends.py)."""

from __future__ import annotations

import functools
import importlib.util

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from tdscheme.engine.evaluation import evaluate
from tdscheme.engine.video import EpisodeRecorder, Recording, record_episode, write_mp4
from tdscheme.engine.video_clips import BackgroundVideos, VideoSettings
from tdscheme.envs import make_atari_env, make_env
from tdscheme.presets import get_preset
from tdscheme.testing import make_gated_env, mlp_policy

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(p) is None for p in ("imageio_ffmpeg", "pygame")),
    reason="the video extra is not installed (pip install 'tdscheme[video]')",
)


def decoded(path) -> tuple[int, float, tuple[int, int]]:
    """Frames, fps and (width, height) of an mp4, read back by decoding every frame."""
    import imageio.v2 as imageio

    with imageio.get_reader(path, format="FFMPEG") as reader:
        meta = reader.get_meta_data()
        frames = sum(1 for _ in reader)
    return frames, meta["fps"], meta["size"]


def test_a_cartpole_episode_decodes_to_its_length_plus_the_reset_frame(tmp_path):
    policy = mlp_policy(4, 2)
    env = make_env("CartPole-v1")
    env.set_seed(3)
    [length] = evaluate(env, policy, episodes=1).lengths
    env.close()

    rng_before = torch.get_rng_state()
    factory = functools.partial(make_env, "CartPole-v1", render_mode="rgb_array")
    with EpisodeRecorder(factory, tmp_path / "videos", max_frames=1000) as recorder:
        recording = recorder.record(policy, name="eval_0", seed=3)
    assert torch.equal(torch.get_rng_state(), rng_before)  # no global random numbers drawn
    assert recording.complete and len(recording.frames) == length + 1
    assert recording.path == tmp_path / "videos" / "eval_0.mp4"
    assert decoded(recording.path) == (length + 1, 50.0, (600, 400))
    assert [p.name for p in (tmp_path / "videos").iterdir()] == ["eval_0.mp4"]  # no partial file


def test_the_frame_cap_stops_an_episode_and_a_batched_env_records_its_first_copy(tmp_path):
    env = make_env("CartPole-v1", num_envs=3, render_mode="rgb_array")
    env.set_seed(0)
    recording = record_episode(env, mlp_policy(4, 2), max_frames=6)
    assert len(recording.frames) == 6 and not recording.complete
    assert recording.frames.shape == (6, 400, 600, 3) and recording.frames.dtype == np.uint8
    whole = record_episode(env, mlp_policy(4, 2), max_frames=1000)
    assert whole.complete and 9 <= len(whole.frames) <= 501
    env.close()


@pytest.mark.parametrize("backend", ["gymnasium", "envpool"])
def test_pong_from_ale_py_records_the_screen_at_15_fps(tmp_path, backend):
    """impala-pong's policy on its video env: ale-py's, whichever backend it trains on."""
    if backend == "envpool" and importlib.util.find_spec("envpool") is None:
        pytest.skip("EnvPool is not installed (pip install 'tdscheme[envpool]')")
    preset = get_preset("impala-pong").override({"env_backend": backend})
    actor = preset.policy_factory()()["actor"]
    with EpisodeRecorder(preset.video_env_factory(), tmp_path, max_frames=40) as recorder:
        recording = recorder.record(actor, name="pong", seed=0)
    assert recording.frames.shape == (40, 210, 160, 3) and recording.fps == 15.0
    assert decoded(recording.path) == (40, 15.0, (160, 210))


def test_envs_that_do_not_render_say_how_to_build_one_that_does(tmp_path):
    with pytest.raises(RuntimeError, match=r"render_mode is None; accepted: .*'rgb_array'"):
        EpisodeRecorder(functools.partial(make_env, "CartPole-v1"), tmp_path)
    with pytest.raises(ValueError, match=r"render_mode='rgb_array' is invalid with backend"):
        make_env("CartPole-v1", backend="envpool", render_mode="rgb_array")
    with pytest.raises(ValueError, match=r"render_mode.*EnvPool does not render"):
        make_atari_env("ALE/Pong-v5", backend="envpool", render_mode="rgb_array")
    with pytest.raises(ValueError, match=r"max_frames=1 is invalid; accepted: an int >= 2"):
        record_episode(make_env("CartPole-v1", render_mode="rgb_array"), mlp_policy(4, 2),
                       max_frames=1)  # fmt: skip


def test_odd_sized_frames_are_padded_to_even_ones(tmp_path):
    frames = np.random.default_rng(0).integers(0, 255, (4, 5, 7, 3), dtype=np.uint8)
    path = write_mp4(tmp_path / "odd.mp4", Recording(frames, 10.0, 0.0, True))
    assert decoded(path) == (4, 10.0, (8, 6))


def test_background_videos_return_at_once_and_newer_weights_replace_a_waiting_one(tmp_path):
    """The driver's video thread: submit() never waits for a recording (the video env holds
    its first step until the test opens its gate, after the submits returned)."""
    gate = tmp_path / "gate"
    factory = functools.partial(
        make_gated_env, "CartPole-v1", path=str(gate), text="open", render_mode="rgb_array"
    )
    policy = mlp_policy(4, 2)
    weights = TensorDict.from_module(policy).data
    with BackgroundVideos(VideoSettings(factory, max_frames=20, gif=True), policy) as videos:
        for frames in (1, 2, 3):
            videos.submit(weights.clone(), frames=frames, seed=0)
        assert videos.poll() == []  # every submit returned while nothing could be recorded
        gate.write_text("open")
        done = videos.drain(timeout_s=60)
    # the first may have started before the second came; a waiting one is replaced
    assert done[-1][0] == 3 and len(done) + videos.skipped == 3
    clip = done[-1][1]
    assert clip.mp4[4:8] == b"ftyp" and clip.gif[:6] == b"GIF89a" and clip.num_frames <= 20


def test_a_video_env_that_cannot_render_fails_when_the_thread_starts():
    with pytest.raises(RuntimeError, match=r"render_mode is None; accepted: .*'rgb_array'"):
        BackgroundVideos(
            VideoSettings(functools.partial(make_env, "CartPole-v1")), mlp_policy(4, 2)
        )
