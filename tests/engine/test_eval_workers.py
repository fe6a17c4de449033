"""Evaluation beside training: eval workers on a real Ray (CartPole, Pendulum, real PPO)."""

from __future__ import annotations

import functools

import pytest
import ray
from tensordict import TensorDict

from tdscheme.engine import TrainerConfig, read_metrics
from tdscheme.engine.eval_pool import EvalPool
from tdscheme.engine.eval_worker import EvalWorker, EvalWorkerSpec
from tdscheme.envs.faulty import make_faulty_env
from tdscheme.errors import EvalWorkerError
from tdscheme.presets import get_preset
from tdscheme.testing import bias_policy, make_env

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


def test_a_worker_gives_the_episodes_of_an_inline_evaluation(ray_clean):
    local = EvalWorker(0, pendulum_spec())
    inline = local.evaluate(weights(-1.0), frames=7, seed=3)
    local.shutdown()
    pool = EvalPool(pendulum_spec(), 1, remote_options=SMALL)
    try:
        assert pool.start_evaluation(weights(-1.0), frames=7, seed=3)
        assert not pool.start_evaluation(weights(1.0), frames=8, seed=4)  # busy: it waits
        assert not pool.start_evaluation(weights(0.0), frames=9, seed=5)  # and is replaced
        reply, newest = pool.drain(timeout_s=60)
    finally:
        pool.shutdown()
    assert (reply.frames, reply.returns, reply.lengths) == (7, inline.returns, inline.lengths)
    assert newest.frames == 9 and pool.skipped == 1


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


def test_training_does_not_wait_and_results_land_at_their_weights_frames(ray_clean, tmp_path):
    preset = tiny_ppo(tmp_path, total_frames=4096, eval_every_frames=1024)
    with preset.build_trainer() as trainer:
        summary = trainer.run()
    metrics = read_metrics(tmp_path)
    evaluated = [step for step, _ in metrics["eval/return"]]
    skipped = int(metrics["eval/skipped"][-1][1])
    # every due point (1024 ... 4096) was evaluated or skipped, the end's included
    assert len(evaluated) + skipped == 4 and 4096 in evaluated
    assert all(step % 1024 == 0 for step in evaluated)
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


def test_make_env_is_the_default_eval_env_factory(ray_clean):
    spec = EvalWorkerSpec(functools.partial(make_env, "Pendulum-v1"), bias_policy(3, 1), 1, 300)
    worker = EvalWorker(0, spec)
    try:
        assert worker.evaluate(weights(0.0), frames=0, seed=None).lengths == (200,)
    finally:
        worker.shutdown()


def test_videos_with_eval_workers_record_the_weights_each_evaluation_gets(ray_clean, tmp_path):
    pytest.importorskip("imageio_ffmpeg", reason="the video extra is not installed")
    preset = tiny_ppo(tmp_path, total_frames=1024, eval_every_frames=512, video=True,
                      video_max_frames=50)  # fmt: skip
    with preset.build_trainer() as trainer:
        trainer.run()
    videos = sorted(p.name for p in (tmp_path / "videos").glob("*.mp4"))
    evaluated = [step for step, _ in read_metrics(tmp_path)["eval/return"]]
    assert videos == sorted(f"eval_{step}.mp4" for step in evaluated) and evaluated
