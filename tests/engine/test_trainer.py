"""Trainer on a real Ray with real envs and losses: logs, evaluation, checkpoints, resume."""

from __future__ import annotations

import collections
import dataclasses
import math

import pytest
import torch

from tdscheme.engine import CheckpointManager, Trainer, TrainerConfig, read_metrics
from tdscheme.engine.checkpoint import load_checkpoint
from tdscheme.engine.evaluation import evaluate
from tdscheme.errors import CheckpointError
from tdscheme.presets import get_preset
from tdscheme.testing import assert_same, bias_policy, make_env


def tiny_ppo(run_dir, **overrides):
    values = {
        "num_collectors": 1, "num_envs": 4, "frames_per_batch": 512, "minibatch_size": 256,
        "num_epochs": 2, "collector_resources": {"num_cpus": 0.5}, "eval_num_envs": 2,
        "eval_episodes": 2, "run_dir": str(run_dir), "progress": False, "target_return": None,
    }  # fmt: skip
    return get_preset("ppo-cartpole").override({**values, **overrides})


@pytest.mark.parametrize(
    ("field", "value"),
    [("total_frames", 0), ("logger", "neptune"), ("eval_episodes", 0), ("keep_checkpoints", 0),
     ("checkpoint_every_frames", -1), ("num_threads", 0), ("target_return", "high"),
     ("video", "yes"), ("video_max_frames", 1)],
)  # fmt: skip
def test_config_rejects_bad_values_naming_the_field(field, value):
    with pytest.raises(ValueError, match=rf"{field}={value!r} is invalid; accepted: "):
        TrainerConfig(**{field: value})


def test_resume_and_video_need_a_run_dir():
    with pytest.raises(ValueError, match="resume=True .* run_dir"):
        TrainerConfig(resume=True)
    with pytest.raises(ValueError, match="video=True .* run_dir"):
        TrainerConfig(video=True)


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_resume_from_damaged_checkpoints_names_the_file(tmp_path, damage):
    manager = CheckpointManager(tmp_path / "checkpoints")
    path = manager.save({"w": torch.zeros(1000)}, 512)
    data = path.read_bytes()
    path.write_bytes(b"not a checkpoint" if damage == "garbage" else data[: len(data) // 2])

    def never_built():
        raise AssertionError("the scheme must not be built from a damaged checkpoint")

    with pytest.raises(CheckpointError, match=rf"{path}.* corrupt, truncated"):
        Trainer(never_built, config=TrainerConfig(run_dir=str(tmp_path), resume=True))


def test_resume_without_checkpoints_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        Trainer(lambda: None, config=TrainerConfig(run_dir=str(tmp_path), resume=True))


def test_evaluate_runs_whole_episodes_of_every_env_copy():
    result = evaluate(make_env("Pendulum-v1", num_envs=3), bias_policy(3, 1), episodes=4)
    assert result.lengths == (200, 200, 200, 200)
    assert -2000 < result.mean_return < 0 and result.std_return >= 0
    with pytest.raises(RuntimeError, match="only 0 of 1 episodes .* max_steps=5"):
        evaluate(make_env("Pendulum-v1"), bias_policy(3, 1), episodes=1, max_steps=5)
    with pytest.raises(ValueError, match="episodes=0 is invalid"):
        evaluate(make_env("Pendulum-v1"), bias_policy(3, 1), episodes=0)


def test_run_logs_evaluates_checkpoints_and_resumes_exactly(ray_clean, tmp_path):
    preset = tiny_ppo(tmp_path, total_frames=2048, eval_every_frames=1024,
                      checkpoint_every_frames=1024, keep_checkpoints=2)  # fmt: skip
    with preset.build_trainer() as trainer:
        summary = trainer.run()
    assert summary["frames"] == 2048 and summary["iterations"] == 4
    assert math.isfinite(summary["eval_return"]) and not summary["target_reached"]
    metrics = read_metrics(tmp_path)
    assert [step for step, _ in metrics["frames"]] == [512, 1024, 1536, 2048]
    assert [step for step, _ in metrics["eval/return"]] == [1024, 2048]
    for name in ("learner/loss_objective", "learner/loss_critic", "learner/grad_norm", "fps",
                 "train/episode_return", "collector/worker_collect_ms", "policy_lag/mean"):  # fmt: skip
        assert all(math.isfinite(v) for _, v in metrics[name]), name
    assert (tmp_path / "config.json").is_file()
    manager = CheckpointManager(tmp_path / "checkpoints")
    assert [p.name for p in manager.list()] == ["ckpt_000000001024.pt", "ckpt_000000002048.pt"]

    # A crash after the 1024-frame checkpoint: the rows of 1536 and 2048 were logged, their
    # checkpoint never written.
    manager.list()[-1].unlink()
    saved = load_checkpoint(manager.latest())
    # Not a multiple of the 512-frame batches: the last batch is cut to fit, exactly.
    resumed = dataclasses.replace(preset.trainer, total_frames=2900, resume=True)
    with Trainer(preset.build_scheme, config=resumed,
                                 run_config=preset.to_dict()) as trainer:  # fmt: skip
        assert trainer.frames == 1024 and trainer.scheme.collector.collected_frames == 1024
        assert_same(saved["scheme"]["learner"], trainer.scheme.learner.state_dict())
        assert trainer.scheme.learner.version == 2
        summary = trainer.run()
        ledger = trainer.scheme.collector.stats()["ledger"]
    assert summary["frames"] == 2900
    assert ledger["yielded"] == 2900 and ledger["discarded"] >= 3072 - 2900, ledger
    assert ledger["unaccounted"] == 0 and ledger["balanced"] and ledger["in_flight"] == 0, ledger
    metrics = read_metrics(tmp_path)
    steps = [step for step, _ in metrics["frames"]]
    assert steps == [512, 1024, 1536, 2048, 2560, 2900]
    for name, rows in metrics.items():
        counts = collections.Counter(step for step, _ in rows)
        assert max(counts.values()) == 1, f"{name} logged a step twice: {counts}"
    assert [step for step, _ in metrics["eval/return"]] == [1024, 2048, 2900]
    assert load_checkpoint(manager.latest())["trainer"]["resumes"] == 1
