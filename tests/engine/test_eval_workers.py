"""Evaluation beside training: eval workers on a real Ray (CartPole, Pendulum, real PPO)."""

from __future__ import annotations

import functools

import pytest
import ray
import torch
from tensordict import TensorDict

from tdscheme.engine import Trainer, TrainerConfig, read_metrics
from tdscheme.engine.eval_pool import EvalPool
from tdscheme.engine.eval_worker import EvalWorker, EvalWorkerSpec
from tdscheme.envs import make_env as make_env_of_gym
from tdscheme.envs.faulty import make_faulty_env
from tdscheme.errors import EvalWorkerError
from tdscheme.presets import get_preset
from tdscheme.scheme import Scheme
from tdscheme.testing import bias_policy, make_env, make_gated_env, mlp_policy

SMALL = {"num_cpus": 0.5}


def pendulum_spec(episodes: int = 2, **faults) -> EvalWorkerSpec:
    env_factory = functools.partial(make_faulty_env, "Pendulum-v1", **faults)
    return EvalWorkerSpec(env_factory, bias_policy(3, 1, bias=0.5), episodes, 1000)


def weights(bias: float) -> TensorDict:
    return TensorDict.from_module(bias_policy(3, 1, bias=bias)).data


@pytest.mark.parametrize(("field", "value"), [("eval_workers", -1), ("eval_timeout_s", 0)])
def test_config_rejects_bad_values(field, value):
    with pytest.raises(ValueError, match=rf"{field}={value!r} is invalid; accepted: "):
        TrainerConfig(**{field: value})


@pytest.fixture(scope="module")
def pendulum_pool(ray_module_clean):
    """One eval worker without faults, shared by the module's tests that only ask it to evaluate.

    Its tests take no ``ray_clean``: the actor may register after that fixture looked (it is
    created in the background); ``ray_module_clean`` checks that it ends with the module.
    """
    pool = EvalPool(pendulum_spec(), 1, remote_options=SMALL)
    yield pool
    pool.shutdown()


def test_a_worker_gives_the_episodes_of_an_inline_evaluation(pendulum_pool):
    local = EvalWorker(0, pendulum_spec())
    inline = local.evaluate(weights(-1.0), frames=7, seed=3)
    local.shutdown()
    pool, skipped = pendulum_pool, pendulum_pool.skipped
    assert pool.start_evaluation(weights(-1.0), frames=7, seed=3)
    assert not pool.start_evaluation(weights(1.0), frames=8, seed=4)  # busy: it waits
    assert not pool.start_evaluation(weights(0.0), frames=9, seed=5)  # and is replaced
    reply, newest = pool.drain(timeout_s=60)
    assert (reply.frames, reply.returns, reply.lengths) == (7, inline.returns, inline.lengths)
    assert newest.frames == 9 and pool.skipped == skipped + 1


def test_a_dead_worker_is_rebuilt_and_its_evaluation_sent_again(ray_clean):
    pool = EvalPool(pendulum_spec(sleep_s=0.01), 1, remote_options=SMALL, max_restarts=1)
    try:
        assert pool.start_evaluation(weights(0.0), frames=100, seed=1)
        ray.kill(pool.actors()[0], no_restart=True)
        (reply,) = pool.drain(timeout_s=120)
        assert reply.frames == 100 and len(reply.returns) == 2
        assert pool.restarts() == [1]
    finally:
        pool.shutdown()


def test_a_hung_worker_is_killed_rebuilt_and_past_its_restarts_named(ray_clean):
    pool = EvalPool(
        pendulum_spec(hang_at_step=5), 1, remote_options=SMALL, max_restarts=1, timeout_s=2.0
    )
    try:
        assert pool.start_evaluation(weights(0.0), frames=100, seed=1)
        with pytest.raises(EvalWorkerError, match=r"eval worker 0: died 2 times .*hung"):
            pool.drain(timeout_s=60)
        assert pool.restarts() == [1]
    finally:
        pool.shutdown()


def test_an_env_that_raises_is_named_with_the_worker(ray_clean):
    pool = EvalPool(pendulum_spec(raise_at_step=3), 1, remote_options=SMALL)
    try:
        pool.start_evaluation(weights(0.0), frames=1, seed=1)
        with pytest.raises(EvalWorkerError, match="eval worker 0: .*injected failure at step 3"):
            pool.drain(timeout_s=60)
    finally:
        pool.shutdown()


def tiny_ppo(run_dir, **overrides):
    values = {
        "num_collectors": 1, "num_envs": 4, "frames_per_batch": 512, "minibatch_size": 256,
        "num_epochs": 2, "collector_resources": SMALL, "eval_num_envs": 2, "eval_episodes": 2,
        "run_dir": str(run_dir), "progress": False, "target_return": None, "eval_workers": 1,
        "eval_worker_resources": SMALL,
    }  # fmt: skip
    return get_preset("ppo-cartpole").override({**values, **overrides})


def gated(tmp_path, text: str, **kwargs) -> functools.partial:
    """An env whose first step waits until the run's metrics.csv holds ``text`` (120 s at most)."""
    path = str(tmp_path / "metrics.csv")
    return functools.partial(make_gated_env, "CartPole-v1", path=path, text=text, **kwargs)


def rows(run_dir) -> list[str]:
    return (run_dir / "metrics.csv").read_text().splitlines()


def test_training_does_not_wait_and_results_land_at_their_weights_frames(ray_clean, tmp_path):
    """Timing-free: the eval worker's env holds its first step until the run has logged its
    last training step (4096 frames); a Trainer that waited for the evaluation of 1024 would
    never log that step (the env raises after 120 s, the run fails)."""
    preset = tiny_ppo(tmp_path, total_frames=4096, eval_every_frames=1024)
    factories = {**preset.factories(), "eval_env_factory": gated(tmp_path, "\n4096,")}
    with Trainer(
        lambda: Scheme(**factories, config=preset.scheme), config=preset.trainer
    ) as trainer:
        summary = trainer.run()
    metrics = read_metrics(tmp_path)
    evaluated = [step for step, _ in metrics["eval/return"]]
    skipped = int(metrics["eval/skipped"][-1][1])
    # every due point (1024 ... 4096) was evaluated or skipped (replaced while it waited)
    assert len(evaluated) + skipped == 4 and evaluated[0] == 1024 and 4096 in evaluated
    assert all(step % 1024 == 0 for step in evaluated)
    lines = rows(tmp_path)
    first_4096 = next(i for i, row in enumerate(lines) if row.startswith("4096,"))
    assert lines.index(f"1024,eval/return,{metrics['eval/return'][0][1]!r}") > first_4096
    assert all(lat >= 0 for _, lat in metrics["eval/latency_s"])
    assert summary["frames"] == 4096 and summary["eval_return"] is not None


def test_target_return_stops_the_run_from_a_workers_result(ray_clean, tmp_path):
    # any CartPole return reaches 1: the first result stops the run, at its weights' frames
    preset = tiny_ppo(tmp_path, total_frames=100_000, eval_every_frames=512, target_return=1.0)
    with preset.build_trainer() as trainer:
        summary = trainer.run()
    assert summary["target_reached"] and summary["target_frames"] % 512 == 0
    assert summary["frames"] >= summary["target_frames"] and summary["frames"] < 100_000
    assert read_metrics(tmp_path)["eval/target_reached"] == [(summary["target_frames"], 1.0)]


@pytest.mark.fast
def test_make_env_is_the_default_eval_env_factory(ray_clean):
    spec = EvalWorkerSpec(functools.partial(make_env, "Pendulum-v1"), bias_policy(3, 1), 1, 300)
    worker = EvalWorker(0, spec)
    try:
        assert worker.evaluate(weights(0.0), frames=0, seed=None).lengths == (200,)
    finally:
        worker.shutdown()


@pytest.mark.parametrize("eval_workers", [0, 1])
def test_videos_never_hold_a_training_step(ray_clean, tmp_path, eval_workers):
    """Timing-free: the video env's first step waits until the run has logged its last step
    (1024 frames), so the video of the evaluation at 512 can only be recorded while training
    goes on: on the eval worker, or inline in the driver's video thread."""
    pytest.importorskip("imageio_ffmpeg", reason="the video extra is not installed")
    preset = tiny_ppo(tmp_path, total_frames=1024, eval_every_frames=512, video=True,
                      video_max_frames=50, eval_workers=eval_workers)  # fmt: skip
    video_env = gated(tmp_path, "\n1024,", render_mode="rgb_array")
    with Trainer(preset.build_scheme, config=preset.trainer, video_env_factory=video_env) as t:
        t.run()
    videos = sorted(p.name for p in (tmp_path / "videos").iterdir())
    evaluated = [step for step, _ in read_metrics(tmp_path)["eval/return"]]
    assert videos == sorted(f"eval_{step}.mp4" for step in evaluated) and 512 in evaluated
    assert all((tmp_path / "videos" / name).read_bytes()[4:8] == b"ftyp" for name in videos)


def test_a_worker_records_the_video_of_the_weights_it_evaluated(ray_clean, tmp_path):
    pytest.importorskip("imageio_ffmpeg", reason="the video extra is not installed")
    from tdscheme.engine.video import EpisodeRecorder
    from tdscheme.engine.video_clips import VideoSettings

    render = functools.partial(make_env_of_gym, "CartPole-v1", render_mode="rgb_array")
    policy = mlp_policy(4, 2)
    spec = EvalWorkerSpec(functools.partial(make_env, "CartPole-v1"), policy, 1, 1000,
                          video=VideoSettings(render, max_frames=1000))  # fmt: skip
    worker = EvalWorker(0, spec)
    weights_of = TensorDict.from_module(policy).data
    try:
        reply = worker.evaluate(weights_of, frames=7, seed=3, video=True)  # does not wait for it
        [(frames, clip)] = list(reply.videos) + worker.videos_done(timeout_s=60)
        plain = worker.evaluate(weights_of, frames=8, seed=3)
        assert worker.videos_done(timeout_s=1) == []  # each video handed over once
    finally:
        worker.shutdown()
    with EpisodeRecorder(render, tmp_path, max_frames=1000) as recorder:
        recording = recorder.record(policy, name="same", seed=3)
    assert frames == 7 and plain.videos == () and reply.returns == plain.returns
    assert clip.num_frames == len(recording.frames) == reply.lengths[0] + 1
    assert (clip.height, clip.width, clip.fps, clip.complete) == (400, 600, 50.0, True)
    assert clip.mp4 == recording.path.read_bytes()  # the same episode, encoded the same way
    with pytest.raises(ValueError, match="video=True is invalid without spec.video"):
        EvalWorker(0, pendulum_spec()).evaluate(weights(0.0), frames=0, seed=0, video=True)


def test_checkpoints_of_one_frame_count_are_scored_each_on_its_own(ray_clean, tmp_path):
    """Eval results are keyed by checkpoint: two checkpoints at 512 frames (two runs of one
    preset) on two eval workers, each scored as it is in this process."""
    from tdscheme.engine import CheckpointManager
    from tdscheme.engine.checkpoint_eval import evaluate_checkpoints
    from tdscheme.presets import preset_from_dict

    preset = get_preset("ppo-cartpole").override({"eval_num_envs": 1, "hidden_sizes": (8,)})
    paths = []
    for run, seed in (("a", 0), ("b", 1)):  # two initializations: two policies
        torch.manual_seed(seed)
        learner = preset.learner_factory()(**preset.policy_factory()())
        state = {"scheme": {"learner": learner.state_dict(), "frames": 512},
                 "config": preset.to_dict()}  # fmt: skip
        paths.append(CheckpointManager(tmp_path / run).save(state, 512))
    kwargs = {"preset_from_config": preset_from_dict, "episodes": 2, "seed": 3}
    here = evaluate_checkpoints(paths, **kwargs)
    on_workers = evaluate_checkpoints(
        paths, **kwargs, eval_workers=2, worker_resources={"num_cpus": 0.5}
    )
    assert [s.path for s in on_workers] == paths and [s.frames for s in on_workers] == [512, 512]
    assert [s.result for s in on_workers] == [s.result for s in here]
    assert here[0].result != here[1].result  # two policies told apart, not one scored twice


@pytest.mark.fast
def test_the_pool_gives_each_reply_its_requests_key(pendulum_pool):
    pool = pendulum_pool
    pool.start_evaluation(weights(0.0), frames=5, seed=1, key="first")
    pool.start_evaluation(weights(1.0), frames=5, seed=1, key="second")  # waits for the first
    replies = pool.drain(timeout_s=60)
    assert [(r.frames, r.key) for r in replies] == [(5, "first"), (5, "second")]
